"""A plan that runs past its own time budget is the plan's doing: an incorrect plan, labeled and measured as one. A
call that the environment did not answer in time is no verdict (issue 55: the gate dropped such plans from its
denominator, so a policy whose plans ran forever was measured on the rest)."""

from __future__ import annotations

from orchrm_dagster.contract import NO_VERDICT_KINDS, RunErrorKind
from orchrm_dagster.grpo import GRPOSettings
from orchrm_dagster.grpo.heldout import FAILED_KINDS, HeldOutMeasure
from orchrm_dagster.labels.batch import failed_run_verdict
from orchrm_dagster.mas.executor import ExecutionResult, execute_plan

PLAN = """<thinking>one solver</thinking>
<agent><agent_id>1</agent_id><agent_name>CoTAgent</agent_name><agent_description>solve</agent_description>
<required_arguments><agent_input></agent_input></required_arguments></agent>
<edge></edge>"""


def test_the_executor_says_a_plan_over_its_budget_timed_out_by_itself():
    from orchrm_dagster.mas.agents import AgentContext

    result = execute_plan("What is 2 + 2?", PLAN, AgentContext(backend=None), timeout_s=0.0)
    assert result.error_kind == RunErrorKind.PLAN_TIMEOUT, result.error
    assert RunErrorKind.PLAN_TIMEOUT not in NO_VERDICT_KINDS | FAILED_KINDS
    assert RunErrorKind.TIMEOUT in FAILED_KINDS  # an endpoint that did not answer: no measurement


def test_a_plan_timeout_is_labeled_incorrect_and_an_endpoint_timeout_gets_no_verdict():
    assert failed_run_verdict("math", "timed out after 300 s at agent 1", "plan_timeout").is_correct is False
    assert failed_run_verdict("math", "timeout: endpoint did not answer", "timeout").is_correct is None


class _Labeled:
    def __init__(self, kind, correct):
        self.result = ExecutionResult(final_answer=None if kind else "4", outputs={}, calls=[], prompt_tokens=0,
                                      completion_tokens=0, error="slow" if kind else None, plan_error=None,
                                      error_kind=kind)
        self.correct = correct


def test_the_held_out_measure_counts_a_plan_timeout_as_incorrect_not_as_failed(monkeypatch):
    from orchrm_dagster.grpo import heldout

    class Scripted:
        tokens = 0

        def __init__(self, executor):
            pass

        def run_samples(self, samples):
            return [_Labeled(RunErrorKind.PLAN_TIMEOUT, False), _Labeled(RunErrorKind.TIMEOUT, None),
                    _Labeled(None, True)]

    monkeypatch.setattr(heldout, "Rollouts", Scripted)
    plans = [{"problem_id": "p", "failure": None, "correct": None} for _ in range(3)]
    HeldOutMeasure([], GRPOSettings(), None, None, None, 1)._execute([None] * 3, plans)
    assert [p["correct"] for p in plans] == [False, None, True]
    assert plans[0]["failure"] is None and plans[1]["failure"].startswith("execution failed (timeout)")
