"""Execute an orchestrator plan: parse it, run its sub-agents in topological order, return the sink's output.

The plan text is data: it is parsed by :func:`orchrm_dagster.plans.parse_plan`, never evaluated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from orchrm_dagster.contract import RunErrorKind
from orchrm_dagster.mas.agents import (
    AGENTS,
    AgentContext,
    AgentError,
    AgentOutput,
    AgentSettings,
    AgentTimeout,
    CallRecord,
    offset_seed,
)
from orchrm_dagster.plans import REFERENCE_RE, AgentSpec, Plan, PlanError, parse_plan

# Agent k of a plan (0-based, topological order) samples with seeds ctx.seed + k * SEED_STRIDE + n, so
# that two agents with the same prompt do not draw the same samples.
SEED_STRIDE = 1000


@dataclass(frozen=True)
class ExecutionResult:
    final_answer: str | None
    outputs: dict[str, str]  # agent id -> output, for the agents that finished
    calls: list[CallRecord]
    prompt_tokens: int
    completion_tokens: int
    error: str | None
    plan_error: str | None  # the PlanError code when the plan does not parse
    error_kind: RunErrorKind | None = None  # set with `error`

    @property
    def ok(self) -> bool:
        return self.error is None

    def subagent_records(self) -> list[dict[str, object]]:
        """The run record's ``subagents`` list."""
        return [call.to_record() for call in self.calls]


@dataclass
class _Run:
    """What a plan execution has produced so far."""

    outputs: dict[str, str] = field(default_factory=dict)
    calls: list[CallRecord] = field(default_factory=list)

    def result(self, final_answer: str | None = None, error: str | None = None, plan_error: str | None = None,
               error_kind: RunErrorKind | None = None) -> ExecutionResult:
        return ExecutionResult(
            final_answer=final_answer, outputs=dict(self.outputs), calls=list(self.calls),
            prompt_tokens=sum(c.prompt_tokens for c in self.calls),
            completion_tokens=sum(c.completion_tokens for c in self.calls),
            error=error, plan_error=plan_error, error_kind=error_kind,
        )


def execute_plan(question: str, plan_text: str, ctx: AgentContext, settings: AgentSettings = AgentSettings(),
                 timeout_s: float | None = None) -> ExecutionResult:
    """Run ``plan_text`` on ``question``. Never raises: failures come back in ``error``.

    ``timeout_s`` is a wall-clock budget for the whole plan, checked before every LLM call; an
    LLM call already started is not interrupted.
    """
    run = _Run()
    try:
        plan = parse_plan(plan_text)
        if isinstance(plan, PlanError):
            return run.result(error=f"plan does not parse: {plan.code}: {plan.message}", plan_error=plan.code,
                              error_kind=RunErrorKind.PLAN_UNPARSEABLE)
        if plan.is_direct:
            return run.result(final_answer=plan.direct_answer)
        return _run_agents(question, plan, ctx, settings, timeout_s, run)
    except Exception as exc:  # the last line of defence: a bug must not cost the caller the whole batch
        return run.result(error=f"executor failed: {type(exc).__name__}: {exc}",
                          error_kind=RunErrorKind.EXECUTOR_FAILED)


def _run_agents(question: str, plan: Plan, ctx: AgentContext, settings: AgentSettings,
                timeout_s: float | None, run: _Run) -> ExecutionResult:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for position, agent_id in enumerate(plan.topological_order()):
        spec = plan.agent(agent_id)
        if deadline is not None and time.monotonic() >= deadline:
            return run.result(error=_timeout_message(timeout_s, agent_id), error_kind=RunErrorKind.PLAN_TIMEOUT)
        agent_ctx = replace(ctx, seed=offset_seed(ctx.seed, position * SEED_STRIDE), deadline=deadline)
        try:
            output = _run_agent(question, spec, agent_ctx, settings, run.outputs)
        except AgentTimeout as exc:
            run.calls += exc.calls
            return run.result(error=_timeout_message(timeout_s, agent_id), error_kind=RunErrorKind.PLAN_TIMEOUT)
        except AgentError as exc:
            run.calls += exc.calls
            return run.result(error=f"agent {agent_id} ({spec.agent_name}) failed: {exc}",
                              error_kind=RunErrorKind.AGENT_FAILED)
        except Exception as exc:
            return run.result(error=f"agent {agent_id} ({spec.agent_name}) failed: {type(exc).__name__}: {exc}",
                              error_kind=RunErrorKind.AGENT_FAILED)
        run.calls += output.calls
        run.outputs[agent_id] = output.text
    return run.result(final_answer=run.outputs[plan.sink])


def _run_agent(question: str, spec: AgentSpec, ctx: AgentContext, settings: AgentSettings,
               outputs: dict[str, str]) -> AgentOutput:
    agent_class = AGENTS.get(spec.agent_name)
    if agent_class is None:
        raise AgentError(f"no sub-agent named {spec.agent_name!r}")
    agent_input = fill_references(spec.agent_input, outputs)
    return agent_class(settings).run(question, agent_input, spec, ctx)


def fill_references(agent_input: str, outputs: dict[str, str]) -> str:
    """``agent_input`` with every ``${ID}`` replaced by the output of agent ID (KeyError if it has none)."""
    return REFERENCE_RE.sub(lambda m: outputs[m.group(1)], agent_input)


def _timeout_message(timeout_s: float | None, agent_id: str) -> str:
    return f"timed out after {timeout_s:g} s at agent {agent_id}"
