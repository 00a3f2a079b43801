"""Sampling and resumable execution, with a scripted LLM test double standing in for the model."""

import time

import orjson
import pytest

from orchrm_dagster.llm import ChatRequest, Completion
from orchrm_dagster.orchestration import PolicySpec, Problem, execute_samples, run_id_for, sample_plans
from orchrm_dagster.orchestration import ExecutionSettings, finished_run_ids

PLAN = """<thinking>one solver</thinking>
<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description>
<required_arguments><agent_input></agent_input></required_arguments></agent>
<edge></edge>"""


class ScriptedBackend:
    name = "scripted"
    model_id = "scripted-model"
    batches_in_process = False

    def __init__(self, plan_text=PLAN):
        self.plan_text = plan_text
        self.requests: list[ChatRequest] = []

    def generate(self, requests):
        self.requests += requests
        out = []
        for request in requests:
            prompt = request.messages[-1]["content"]
            if request.grammar is not None:  # an orchestrator request
                out.append(Completion(self.plan_text, len(prompt.split()), 40, (-0.5, -1.5)))
            else:
                out.append(Completion("Step: 6 x 3. The answer is \\boxed{18}.", len(prompt.split()), 12))
        return out


PROBLEMS = [Problem("gsm8k-test-0000", "gsm8k", "Eggs?", "18", "math"),
            Problem("gsm8k-test-0001", "gsm8k", "Bolts?", "3", "math")]


def test_samples_are_batched_seeded_and_record_logprob():
    policy = PolicySpec(name="p", kind="specialized")
    backend = ScriptedBackend()
    samples = sample_plans(policy, backend, PROBLEMS, n=3, seed=5)
    assert len(samples) == 6 and len(backend.requests) == 6
    assert {s.run_id for s in samples} == {run_id_for(policy, p.problem_id, 5, i) for p in PROBLEMS for i in range(3)}
    assert len({r.sampling.seed for r in backend.requests}) == 6  # every sample its own seed
    assert all(s.plan_parses and s.plan_logprob == -1.0 and s.policy_kind == "specialized" for s in samples)
    again = sample_plans(policy, ScriptedBackend(), PROBLEMS, n=3, seed=5)
    assert [s.seed for s in again] == [s.seed for s in samples]


def test_resampling_skips_samples_already_drawn():
    policy = PolicySpec(name="p")
    first = sample_plans(policy, ScriptedBackend(), PROBLEMS, n=2, seed=0)
    backend = ScriptedBackend()
    more = sample_plans(policy, backend, PROBLEMS, n=3, seed=0, skip_run_ids=frozenset(s.run_id for s in first))
    assert len(backend.requests) == 2 and {s.sample_index for s in more} == {2}


def test_malformed_plan_is_a_failed_run_with_a_reason(tmp_path):
    samples = sample_plans(PolicySpec(name="p"), ScriptedBackend("no tags at all"), PROBLEMS[:1], n=1, seed=0)
    assert not samples[0].plan_parses
    report = execute_samples(samples, ScriptedBackend, tmp_path / "out.partial")
    record = orjson.loads((tmp_path / "out.partial").read_bytes())
    assert report.failed == 1 and report.malformed_plans == 1
    assert record["error"].startswith("plan does not parse") and record["final_answer"] is None
    assert record["meta"]["plan_error"] == samples[0].plan_error_code == "no_agents"
    assert record["meta"]["error_kind"] == samples[0].plan_error_kind == "plan_unparseable"


def test_a_generation_that_failed_is_not_executed_and_says_so(tmp_path):
    class Failing(ScriptedBackend):
        def generate(self, requests):
            return [Completion("", 0, 0, finish_reason="error", error="server down") for _ in requests]

    [sample] = sample_plans(PolicySpec(name="p"), Failing(), PROBLEMS[:1], n=1, seed=0)
    assert sample.plan_error_kind == "generation_failed" and sample.plan_error_code is None
    backend = ScriptedBackend()
    report = execute_samples([sample], lambda: backend, tmp_path / "out.partial")
    [record] = [orjson.loads(line) for line in (tmp_path / "out.partial").read_bytes().splitlines()]
    assert backend.requests == [] and report.executed == report.failed == 1
    assert record["error"] and record["meta"]["error_kind"] == "generation_failed" and record["subagents"] == []


def test_execution_writes_contract_records_with_token_accounting(tmp_path):
    from orchrm_dagster.contract.record import RunRecord

    samples = sample_plans(PolicySpec(name="p"), ScriptedBackend(), PROBLEMS, n=1, seed=0)
    execute_samples(samples, ScriptedBackend, tmp_path / "out.partial")
    lines = (tmp_path / "out.partial").read_bytes().splitlines()
    records = [RunRecord.model_validate_json(line) for line in lines]
    assert [r.final_answer for r in records] == ["Step: 6 x 3. The answer is \\boxed{18}."] * 2
    tokens = records[0].tokens
    assert tokens.orchestrator_completion == 40 and tokens.subagent_completion == 12
    assert tokens.subagent_prompt == records[0].subagents[0].prompt_tokens > 0


def test_interrupted_execution_resumes_without_redoing_finished_runs(tmp_path):
    samples = sample_plans(PolicySpec(name="p"), ScriptedBackend(), PROBLEMS, n=2, seed=0)
    partial = tmp_path / "out.partial"
    execute_samples(samples[:3], ScriptedBackend, partial)
    with open(partial, "ab") as out:  # a crash in the middle of writing the fourth record
        out.write(b'{"run_id": "p/gsm8k-test-0001/seed0/1", "proble')
    backend = ScriptedBackend()
    report = execute_samples(samples, lambda: backend, partial)
    assert (report.resumed, report.executed) == (3, 1)
    assert len(backend.requests) == 1  # one CoT call for the one run not yet finished
    assert finished_run_ids(partial) == {s.run_id for s in samples}
    assert len(partial.read_bytes().splitlines()) == 4


class BatchingScriptedBackend(ScriptedBackend):
    """Like an in-process model: slow per call, so concurrent plans are worth merging into one batch."""

    batches_in_process = True

    def __init__(self):
        super().__init__()
        self.batch_sizes: list[int] = []

    def generate(self, requests):
        self.batch_sizes.append(len(requests))
        time.sleep(0.02)
        return super().generate(requests)


def test_concurrent_plans_share_batches_and_every_run_lands_once(tmp_path):
    problems = [Problem(f"gsm8k-test-{i:04d}", "gsm8k", f"Q{i}?", "18", "math") for i in range(6)]
    samples = sample_plans(PolicySpec(name="p"), ScriptedBackend(), problems, n=2, seed=0)
    backend = BatchingScriptedBackend()
    partial = tmp_path / "out.partial"
    report = execute_samples(samples, lambda: backend, partial, ExecutionSettings(concurrent_plans=4))
    assert (report.executed, report.failed) == (12, 0)
    assert max(backend.batch_sizes) > 1 and sum(backend.batch_sizes) == 12  # one CoT call per plan
    assert report.mean_batch_size == pytest.approx(12 / len(backend.batch_sizes), abs=0.01)
    records = [orjson.loads(line) for line in partial.read_bytes().splitlines()]
    assert sorted(r["run_id"] for r in records) == sorted(s.run_id for s in samples)
    assert all(r["final_answer"] and r["tokens"]["subagent_completion"] == 12 for r in records)


def test_one_plan_at_a_time_calls_the_backend_directly(tmp_path):
    samples = sample_plans(PolicySpec(name="p"), ScriptedBackend(), PROBLEMS, n=2, seed=0)
    backend = BatchingScriptedBackend()
    execute_samples(samples, lambda: backend, tmp_path / "out.partial", ExecutionSettings(concurrent_plans=1))
    assert backend.batch_sizes == [1, 1, 1, 1]
