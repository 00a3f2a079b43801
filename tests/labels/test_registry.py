import threading
import time
from importlib.metadata import version

import pytest

from orchrm_dagster.labels import (Claim, LabelSettings, Verdict, answer_type_for, label_answer, label_cached,
                                   labeler_for, labelers, register_labeler)
from orchrm_dagster.labels import labeler as labeler_registry
from orchrm_dagster.labels.verdict import correct, incorrect


@pytest.mark.parametrize(
    ("benchmark", "expected"),
    [
        ("aime24", "math"),
        ("AIME25", "math"),
        ("gsm8k_test", "math"),
        ("math500", "math"),
        ("math-500", "math"),
        ("deepscaler", "math"),
        ("amc23", "math"),
        ("olympiadbench", "math"),
        ("hotpotqa_dev", "qa"),
        ("browsecomp", "qa"),
        ("nq_open", "qa"),
        ("triviaqa", "qa"),
        ("squad_v2", "qa"),
        ("gpqa_diamond", "choice"),
    ],
)
def test_answer_type_by_benchmark(benchmark, expected):
    assert answer_type_for(benchmark, "x", None) == expected


def test_choices_win_over_benchmark_name():
    assert answer_type_for("hotpotqa", "Paris", ["Paris", "Rome"]) == "choice"
    assert answer_type_for("hotpotqa", "Paris", []) == "qa"


@pytest.mark.parametrize(
    ("reference", "expected"),
    [("42", "math"), ("1,000", "math"), ("-3.5", "math"), ("\\frac{1}{2}", "math"), ("Paris", "qa"), (None, "qa")],
)
def test_answer_type_heuristic_for_unknown_benchmarks(reference, expected):
    assert answer_type_for("custom_eval", reference, None) == expected


def test_versions():
    assert {labeler.name: labeler.version for labeler in labelers().values()} == {
        "math_verify": f"math-verify-{version('math-verify')}+orchrm1",
        "qa_em_f1": "squad-norm+orchrm1",
        "choice_letter": "orchrm1",
    }


def test_verdict_is_frozen():
    verdict = label_answer("qa", "Paris", "Paris")
    assert isinstance(verdict, Verdict)
    with pytest.raises(AttributeError):
        verdict.is_correct = False


def test_missing_reference():
    verdict = label_answer("math", None, "42")
    assert not verdict.is_correct
    assert verdict.reason == "no reference answer"


def test_empty_answer_tag_is_no_answer():
    assert label_answer("qa", "Paris", "<answer> </answer>").reason == "no final answer"


def test_unknown_answer_type_is_a_caller_error():
    with pytest.raises(ValueError):
        label_answer("essay", "x", "y")


def test_cached_labels_match_uncached():
    label_cached.cache_clear()
    first = label_cached("choice", "Paris", "(C)", ["London", "Berlin", "Paris"])
    again = label_cached("choice", "Paris", "(C)", ("London", "Berlin", "Paris"))
    assert first == again == label_answer("choice", "Paris", "(C)", ["London", "Berlin", "Paris"])
    assert label_cached.cache_info().hits == 1
    assert label_cached("qa", "a b", "a c", qa_f1_threshold=0.5) != label_cached("qa", "a b", "a c")


def label_in_thread(*args):
    results = []
    worker = threading.Thread(target=lambda: results.append(label_answer(*args)))
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive()
    return results[0]


def test_labels_from_a_worker_thread():
    assert label_in_thread("math", "\\frac{14}{3}", "The answer is $14/3$").is_correct
    assert label_in_thread("math", "\\sqrt{2}", "\\boxed{2}").is_correct is False
    assert label_in_thread("qa", "Paris", "Answer: Paris").is_correct
    assert label_in_thread("choice", "B", "(B)").is_correct


def test_huge_answer_in_a_worker_thread_returns_promptly():
    # No signal-based timeout exists off the main thread; the size guard must catch this.
    started = time.monotonic()
    verdict = label_in_thread("math", "5", "$9^{9^{9^{9}}}$")
    assert not verdict.is_correct
    assert time.monotonic() - started < 10


class YesNoLabeler:
    """A labeler written in a test: the registry is all a new answer type needs."""

    name = "yes_no"
    version = "test1"
    answer_type = "yesno"
    benchmark_prefixes = ("boolq",)
    prompt_file = "answer_qa"

    def claim(self, reference, choices):
        return Claim.NONE

    def label(self, reference, text, choices, **options):
        said = text.strip().rstrip(".").split()[-1].lower()
        if said == reference.lower():
            return correct(self.name, self.version, said)
        return incorrect(self.name, self.version, said, f"said {said}")


@pytest.fixture
def with_yes_no(monkeypatch):
    monkeypatch.setattr(labeler_registry.LABELERS, "_entries", dict(labelers()))  # forgotten after the test
    register_labeler(YesNoLabeler())


def test_a_labeler_registered_in_a_test_is_chosen_dispatched_and_prompted(with_yes_no):
    from orchrm_dagster.mas import CoTAgent, render_prompt
    from tests.mas.scripted import ScriptedBackend
    from tests.mas.test_agents import run

    assert answer_type_for("BoolQ_dev", "yes", None) == "yesno"
    assert answer_type_for("boolq_dev", "yes", ["yes", "no"]) == "choice"  # a problem with choices stays one
    verdict = label_answer("yesno", "Yes", "<answer>I think yes.</answer>")
    assert (verdict.is_correct, verdict.labeler, verdict.labeler_version) == (True, "yes_no", "test1")
    assert label_answer("yesno", "yes", "").reason == "no final answer"
    assert LabelSettings(answer_types={"custom": "yesno"}).answer_types == {"custom": "yesno"}
    backend = ScriptedBackend()
    run(CoTAgent(), backend, answer_format="yesno")
    assert render_prompt("answer_qa") in backend.prompts[0]


def test_an_answer_type_no_labeler_registered_is_refused_where_it_is_configured():
    with pytest.raises(ValueError, match="unknown answer_type 'yesno'"):
        LabelSettings(answer_types={"custom": "yesno"})
    with pytest.raises(ValueError, match="unknown answer_type 'yesno'"):
        labeler_for("yesno")


def test_two_labelers_for_one_answer_type_are_refused(with_yes_no):
    with pytest.raises(ValueError, match="answer_type 'yesno' is registered already, by YesNoLabeler 'yes_no'"):
        register_labeler(YesNoLabeler())
