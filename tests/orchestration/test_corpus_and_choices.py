"""The runner as the paper ran it: WebSearchAgent searches a BM25 corpus at every executor entry point, and a
multiple-choice problem keeps its choices from the problems table to the prompts, the labels and GRPO."""

from __future__ import annotations

import os

import orjson
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.environments import executor_for
from orchrm_dagster.grpo import GRPOSettings, Rollouts
from orchrm_dagster.grpo.rewards.trajectory import TrajectoryReward
from orchrm_dagster.grpo.problems import plan_dataset
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.mas import load_retriever, read_corpus
from orchrm_dagster.mas.agents import NO_RETRIEVER_NOTE
from orchrm_dagster.orchestration import (Cell, ExecutionSettings, PlanJob, PlanSamplingSettings, PolicySpec,
                                          execute_and_land, read_samples, sample_partition,
                                          select_problems)
from orchrm_dagster.problems import load_problems, problem_sources, problem_table, reference_answers

from ..mas.scripted import COT, QUERY, SUMMARIZE, ScriptedBackend, prompt_of


def plan_of(agent_name: str) -> str:
    return (f"<thinking>one agent</thinking><agent><agent_id>1</agent_id><agent_name>{agent_name}</agent_name>"
            "<agent_description>answer</agent_description><required_arguments><agent_input></agent_input>"
            "</required_arguments></agent><edge></edge>")


ORCHESTRATOR = "You are an orchestrator"


def web_backend(query: str = "Scott Derrickson nationality") -> ScriptedBackend:
    backend = ScriptedBackend([(ORCHESTRATOR, plan_of("WebSearchAgent")), (QUERY, query),
                               (SUMMARIZE, "Both are American [1].\nAnswer: yes")])
    backend.batches_in_process = False
    return backend


def landed_records(root, landed) -> list[dict]:
    return [orjson.loads(line) for line in root.fs.cat_file(landed.path).splitlines()]


# --- the corpus -------------------------------------------------------------------------------------------------


def test_the_shipped_hotpotqa_corpus_holds_the_distractor_paragraphs_and_is_built_once():
    retriever = load_retriever("hotpotqa")
    assert len(retriever) == 521 and retriever.rejected == ()
    assert load_retriever("hotpotqa") is retriever  # cached per process and file version
    hits = [doc_id for doc_id, _, _ in retriever.search("Scott Derrickson Ed Wood nationality", k=5)]
    assert {"Scott Derrickson", "Ed Wood"} <= set(hits)  # the gold supporting paragraphs: it leaks, by design


def test_execution_artifacts_give_websearch_the_shipped_corpus_by_default(storage_root):
    cell = Cell("hotpotqa", "p")
    sample_partition(storage_root, "hotpotqa", PolicySpec(name="p"), web_backend(), PlanSamplingSettings(1, 1))
    report, landed = execute_and_land(storage_root, cell, web_backend, ExecutionSettings(concurrent_plans=1))
    assert report.corpus_documents == 521 and report.corpus_rejected == ()
    [record] = landed_records(storage_root, landed)
    query, summary = record["subagents"]
    assert query["agent_name"] == summary["agent_name"] == "WebSearchAgent"
    assert "retrieved: " in summary["note"] and "Scott Derrickson" in summary["note"]
    assert "(Scott Derrickson) Scott Derrickson\nScott Derrickson (born July 16, 1966) is an American director" in \
        summary["input"]
    assert record["final_answer"].endswith("Answer: yes") and record["error"] is None


def execute(jobs, backend, settings):
    return executor_for(settings, lambda: backend).execute(jobs)


def test_without_a_corpus_websearch_falls_back_to_one_cot_call():
    [result] = execute([PlanJob("Who?", plan_of("WebSearchAgent"), "qa")], web_backend(),
                             ExecutionSettings(corpus=None, concurrent_plans=1))
    assert [call.note for call in result.calls] == [NO_RETRIEVER_NOTE]


def write_corpus(path, rows) -> None:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))


def test_a_corpus_file_reaches_every_executor_entry_point_and_a_new_version_is_reread(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    write_corpus(corpus, [{"id": "fuji", "text": "Mount Fuji is the highest mountain in Japan."},
                          {"id": "seine", "text": "The Seine flows through Paris."}])
    execution = ExecutionSettings(corpus=str(corpus), concurrent_plans=1)
    job = PlanJob("Which is the highest mountain in Japan?", plan_of("WebSearchAgent"), "qa")
    [result] = execute([job], web_backend("highest mountain Japan"), execution)
    assert "retrieved: fuji" in result.calls[-1].note

    first = load_retriever(str(corpus))
    write_corpus(corpus, [{"id": "everest", "text": "Everest is the highest mountain on Earth, not in Japan."}])
    os.utime(corpus, ns=(os.stat(corpus).st_atime_ns, os.stat(corpus).st_mtime_ns + 10**9))
    assert load_retriever(str(corpus)) is not first

    rollouts = Rollouts(executor_for(execution, lambda: web_backend("highest mountain Japan")))  # GRPO's rewards
    [rolled] = rollouts.run([job.question], [job.plan], ["qa"])
    assert "retrieved: everest" in rolled.result.calls[-1].note


def test_a_missing_corpus_file_is_named(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl.*shipped corpora: hotpotqa"):
        execute([PlanJob("q", plan_of("CoTAgent"), "qa")], web_backend(), ExecutionSettings(corpus=str(missing)))
    with pytest.raises(ValueError, match="corpus must be"):
        ExecutionSettings(corpus=" ")


def test_a_corpus_without_a_valid_line_is_refused(tmp_path):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad.jsonl has no valid document: .*bad.jsonl:1: text: missing"):
        load_retriever(str(corpus))


BAD_LINES = {  # what a bad line looks like -> the field its report names
    b"not json {": "(line)",
    b"[1, 2]": "(line)",
    b'{"id": "x"}': "text",
    b'{"id": "x", "text": 3}': "text",
    b'{"id": "x", "text": "  "}': "text",
    b'{"id": [1], "text": "fine"}': "id",
}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(sorted(BAD_LINES)),
                          st.text(min_size=1, max_size=30).filter(str.strip)), max_size=12))
def test_the_corpus_reader_keeps_valid_lines_and_reports_each_bad_one_by_file_line_and_field(tmp_path, lines):
    path = tmp_path / "corpus.jsonl"
    encoded = [line if isinstance(line, bytes) else orjson.dumps({"id": f"d{n}", "text": line})
               for n, line in enumerate(lines, start=1)]
    path.write_bytes(b"".join(line + b"\n" for line in encoded))
    corpus = read_corpus(path)
    assert corpus.ids == [f"d{n}" for n, line in enumerate(lines, start=1) if isinstance(line, str)]
    assert corpus.documents == [line for line in lines if isinstance(line, str)]
    expected = [f"{path}:{n}: {BAD_LINES[line]}: " for n, line in enumerate(lines, start=1) if isinstance(line, bytes)]
    assert [report[:len(prefix)] for report, prefix in zip(corpus.rejected, expected)] == expected
    assert len(corpus.rejected) == len(expected)


# --- multiple choice --------------------------------------------------------------------------------------------

CHOICES = ("Mars", "Jupiter", "Venus")
LISTED = "Choices:\nA. Mars\nB. Jupiter\nC. Venus"


@pytest.fixture
def choice_root(storage_root, tmp_path):
    """A problems table with one multiple-choice problem whose reference is the text of a choice."""
    source = tmp_path / "mcq.jsonl"
    source.write_bytes(orjson.dumps({"problem_id": "mcq-1", "benchmark": "mcq", "question": "Which planet is largest?",
                                     "answer": "Jupiter", "choices": list(CHOICES)}) + b"\n")
    table = load_problems(problem_sources([str(source)], shipped=())).table
    storage_root.write_table(table, storage_root.table_file("problems"))
    return storage_root


def test_choices_reach_the_orchestrator_the_subagents_and_the_label(choice_root):
    [problem] = select_problems(choice_root, "mcq", 1)
    assert problem.choices == CHOICES and problem.answer_type == "choice"
    orchestrator = ScriptedBackend([(ORCHESTRATOR, plan_of("CoTAgent"))])
    sample_partition(choice_root, "mcq", PolicySpec(name="p"), orchestrator, PlanSamplingSettings(1, 1))
    assert LISTED in orchestrator.prompts[0]
    [sample] = read_samples(choice_root, Cell("mcq", "p"))
    assert sample.choices == CHOICES  # kept through the samples table

    subagents = ScriptedBackend([(COT, "Jupiter is the largest.\nAnswer: B")])
    subagents.batches_in_process = False
    _, landed = execute_and_land(choice_root, Cell("mcq", "p"), lambda: subagents, ExecutionSettings(concurrent_plans=1))
    assert LISTED in subagents.prompts[0] and "Which planet is largest?" in subagents.prompts[0]

    ingest_batch(choice_root, landed.batch_id, landed.path)
    label_batch(choice_root, landed.batch_id, reference_answers(problem_table(choice_root)))
    [labels] = [pq.read_table(choice_root.fs.open(part, "rb")).to_pylist()
                for part in choice_root.batch_files("labels", landed.batch_id)]
    assert [(row["is_correct"], row["extracted_answer"], row["labeler"]) for row in labels] == [
        (True, "B", "choice_letter")]


def test_choices_reach_grpos_dataset_and_the_trajectory_reward(choice_root):
    problems = select_problems(choice_root, "mcq", 1)
    [row] = plan_dataset(PolicySpec(name="p"), problems, GRPOSettings(steps=1)).to_list()
    assert row["choices"] == list(CHOICES) and LISTED in row["prompt"][0]["content"]

    backend = ScriptedBackend([(COT, "Answer: B")])
    backend.batches_in_process = False
    reward = TrajectoryReward(Rollouts(executor_for(ExecutionSettings(concurrent_plans=1), lambda: backend)), margin=1.0)
    columns = {name: [row[name]] for name in ("question", "answer", "answer_type", "problem_id", "choices")}
    assert reward.raw_rewards([plan_of("CoTAgent")], **columns) == [1.0]  # "B" is "Jupiter"
    assert LISTED in prompt_of(backend.requests[0])
    without = {**columns, "choices": [None]}
    assert reward.raw_rewards([plan_of("CoTAgent")], **without) == [0.0]  # the letter alone names no choice text
