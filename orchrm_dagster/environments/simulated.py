"""`simulated`: the plan is sampled by the real orchestrator, but executing it draws its correctness from a truth
function of the parsed plan (orchrm_dagster/truths/), seeded by the run: the same plan in the same run answers the
same. A correct draw answers the reference; a wrong one an answer its labeler judges wrong. An unparseable plan fails
as it does with real agents. Sub-agent tokens are simulated per agent type from costs measured on real runs
(environments/costs.py), so budgets and token ratios keep their meaning. Everything made from these runs says it is
simulated."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence

from orchrm_dagster.contract import RunErrorKind
from orchrm_dagster.engine_config import Field, engine_config, sections_config
from orchrm_dagster.environments import Environment, EnvironmentContext, Executor, PlanJob, register_environment
from orchrm_dagster.environments.costs import calls_of, load_costs
from orchrm_dagster.labels import wrong_answer
from orchrm_dagster.mas import CallRecord, ExecutionResult
from orchrm_dagster.plans import Plan, PlanError, parse_plan
from orchrm_dagster.truths import TRUTHS, truth_named, truths

TruthName = TRUTHS.name_type
TruthSettings = sections_config("TruthSettings", "Each truth function's parameters, by name (read only for the "
                                "chosen `truth`).", truths(), __name__)
SIMULATED_MODEL = "simulated"  # the sub-agent model its calls name


@engine_config
class SimulatedEnvironmentSettings:
    truth: TruthName = Field(default="plan_success_rate",
                             description="What decides a plan's correctness: " + TRUTHS.described())
    truth_settings: TruthSettings = Field(default_factory=TruthSettings,
                                          description="Each truth function's parameters, by name")
    costs: str | None = Field(default=None, description="A JSON file of per-agent-type token costs (the shipped "
                                                        "file's format); unset: the shipped measurement")


def run_seed(job: PlanJob) -> int:
    """The draw of one run: its seed, question and plan (stable across processes and Python versions)."""
    return _stable(f"{job.seed}\x00{job.question}\x00{job.plan}")


def answer_text(job: PlanJob, correct: bool) -> str:
    """The final answer of a draw, in the direct-answer form every labeler reads. A wrong draw gives the problem's one
    distractor (seeded by the question), so wrong runs agree as a model's common mistake does: majority vote is not
    handed the answer by wrong answers that scatter."""
    if correct:
        return f"<answer>{job.reference.strip()}</answer>"
    distractor = random.Random(_stable(f"{job.question}\x00{job.reference}"))
    return f"<answer>{wrong_answer(distractor, job.reference.strip(), job.answer_type, job.choices)}</answer>"


def _stable(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


class SimulatedExecutor(Executor):
    environment = "simulated"
    model_id = SIMULATED_MODEL

    def __init__(self, config: SimulatedEnvironmentSettings, execution):
        self.truth_function = truth_named(config.truth)
        self.truth_config = TRUTHS.settings_of(config.truth_settings, self.truth_function)
        self.costs = load_costs(config.costs)
        self.execution = execution
        self.record_meta = {"simulated_truth": config.truth}
        self.truth = f"{config.truth} {self.truth_config}"

    def completed(self, jobs: Sequence[PlanJob]) -> Iterator[tuple[int, ExecutionResult]]:
        for index, job in enumerate(jobs):
            yield index, self.run(job)

    def run(self, job: PlanJob) -> ExecutionResult:
        plan = parse_plan(job.plan)
        if isinstance(plan, PlanError):
            return _failed(f"plan does not parse: {plan.code}: {plan.message}", RunErrorKind.PLAN_UNPARSEABLE,
                           plan.code)
        calls = self.calls(plan)
        if job.reference is None or not job.reference.strip():
            return _failed("simulated environment: the problem has no reference answer to answer with",
                           RunErrorKind.EXECUTOR_FAILED, calls=calls)
        correct = random.Random(run_seed(job)).random() < self.truth_function.chance(self.truth_config, plan)
        final = answer_text(job, correct)
        return _result(calls, final, {plan.sink: final} if plan.agents else {})

    def calls(self, plan: Plan) -> list[CallRecord]:
        """The sub-agent calls the plan's agents would make, each with its agent type's measured mean tokens (a
        completion capped at the execution's budget)."""
        settings = self.execution
        records = []
        for agent_id in plan.topological_order():
            agent = plan.agent(agent_id)
            cost = self.costs.call(agent.agent_name)
            completion = min(cost.completion_tokens, settings.subagent_max_new_tokens)
            records += [CallRecord(agent_id, agent.agent_name, "", "", cost.prompt_tokens, completion,
                                   SIMULATED_MODEL, note="simulated call: tokens from measured costs")
                        for _ in range(calls_of(agent, settings.agents, settings.corpus is not None, self.costs))]
        return records


def _failed(error: str, kind: RunErrorKind, plan_error: str | None = None,
            calls: list[CallRecord] | None = None) -> ExecutionResult:
    return _result(calls or [], error=error, plan_error=plan_error, kind=kind)


def _result(calls: list[CallRecord], final: str | None = None, outputs: dict | None = None, error: str | None = None,
            plan_error: str | None = None, kind: RunErrorKind | None = None) -> ExecutionResult:
    """A simulated execution, its tokens the sum of its simulated calls'."""
    return ExecutionResult(final, outputs or {}, calls, sum(c.prompt_tokens for c in calls),
                           sum(c.completion_tokens for c in calls), error, plan_error, kind)


def build(config: SimulatedEnvironmentSettings, context: EnvironmentContext) -> SimulatedExecutor:
    return SimulatedExecutor(config, context.execution)


ENVIRONMENT = register_environment(Environment(
    name="simulated", description="correctness drawn from a truth function of the parsed plan, sub-agent tokens from "
                                  "measured per-agent costs (no sub-agent runs; every figure made from it says "
                                  "SIMULATED)",
    config=SimulatedEnvironmentSettings, build=build, simulated=True))
