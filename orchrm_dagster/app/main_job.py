"""The main job on the embedded default, as a sequence of materializations on the shared Dagster instance. The CLI
only parses its flags and prints what each step reports."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from assets.config_bridge import from_engine
from assets.runs import failure_cause
from assets.run_configs import EvaluationConfig
from orchrm_dagster.app.commands import (BatchOutcome, ingest_files, ingest_landed,
                                         materialization_metadata, materialize_selection, orchestrate)
from orchrm_dagster.settings import MainJobOptions
from orchrm_dagster.evaluation import EvaluationSettings, JudgeSettings, VerifierSettings
from orchrm_dagster.evaluation.methods import method_names
from orchrm_dagster.grpo import small_execution
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.reporting import duration
from orchrm_dagster.synthetic import EXAMPLE_BATCH, generate_runs, write_jsonl

# Shorter sub-agent work than the execution defaults (a GRPO round's and the loop's rollouts, with 64-token answers):
# decoding a sub-agent round is most of a real run's time on 2 cores, and the main job ends within 8 minutes.
MAIN_JOB_EXECUTION = dataclasses.replace(small_execution(), subagent_max_new_tokens=64)


class StepFailed(RuntimeError):
    """A materialization of the sequence failed; the message names the step, the run and each failed op."""


# The main job's evaluation: every method at N = 1, 2, 4, 8 but plan_judge (8 whole plans a prompt: 13 s a call on 2
# cores); the trajectory judges (whole, and cut at 600 characters) at N=8 only, one candidate set per problem; the
# panel fits its fusion weights on the runs of 24 problems the reward model saw. With every method, the judges at
# every N and more draws, `orchrm evaluate` (its defaults) makes the whole comparison.
MAIN_JOB_EVALUATION = EvaluationSettings(
    methods=tuple(name for name in method_names() if name != "plan_judge"),
    judge=JudgeSettings(draws=1, context_tokens=8192, max_candidate_chars=600, ns=(8,)),
    verifier=VerifierSettings(max_fit_problems=24))
HELD_OUT_POLICY = ("generated-orchestrator", "base", None)


@dataclass(frozen=True)
class PolicyExecution:
    benchmark: str
    policy: str
    metadata: dict  # the execution_artifacts materialization's metadata


ALL_POLICIES = "all"


def resolve_policies(defs: dg.Definitions, policy_names: list[str] | tuple[str, ...]) -> list[str]:
    """The policies to run: those named (configured ones or policy checkpoints, `grpo-rNNNN`), or every configured
    one when none or `all` is named; StepFailed naming the known ones for a name that is neither."""
    registry = defs.resources["policy_registry"]
    configured = registry.names()
    if not policy_names or ALL_POLICIES in policy_names:
        return configured
    known = registry.names(defs.resources["storage"].storage_root())
    unknown = [name for name in policy_names if name not in known]
    if unknown:
        raise StepFailed(f"unknown policy {', '.join(unknown)}: the known ones are {', '.join(known)} "
                         f"(or {ALL_POLICIES})")
    return list(policy_names)


def orchestrate_policies(defs: dg.Definitions, benchmark: str, policy_names: list[str],
                         sampling: PlanSamplingSettings, execution: ExecutionSettings, on_start: Callable[[str], None] | None = None,
                         on_done: Callable[[PolicyExecution], None] | None = None) -> list[PolicyExecution]:
    """Samples and executes plans of each policy in `policy_names` (as `resolve_policies` returns them)."""
    executions = []
    for name in policy_names:
        if on_start:
            on_start(name)
        result = orchestrate(defs, benchmark, name, sampling, execution)
        if not result.success:
            raise StepFailed(f"{benchmark} x {name} failed (run {result.run_id}): " + failure_cause(result.all_events))
        executions.append(PolicyExecution(benchmark, name, materialization_metadata(result, "execution_artifacts")))
        if on_done:
            on_done(executions[-1])
    return executions


def materialize_or_fail(defs: dg.Definitions, selection: str,
                        run_config: dg.RunConfig | None = None) -> dg.ExecuteInProcessResult:
    result = materialize_selection(defs, selection, None, run_config)
    if not result.success:
        raise StepFailed(f"{selection} failed (run {result.run_id}): " + failure_cause(result.all_events))
    return result


def run_main_job(defs: dg.Definitions, options: MainJobOptions = MainJobOptions(),
                 on_step: Callable[[str], None] = lambda step: None,
                 on_execution: Callable[[PolicyExecution], None] | None = None,
                 on_done: Callable[[str], None] = lambda result: None) -> tuple[list[BatchOutcome], str]:
    """problems; real MAS runs from the chosen policies (landed); a generated history batch where plans decide
    correctness; labels; pairs; a reward model; then the real runs, the example batch and a generated batch on
    other problems, none of which the reward model saw; scores of every run; the Best-of-N evaluation on those
    held-out runs. Returns the ingest outcomes of every batch and the evaluation's id. `on_step` says what starts,
    `on_done` what the step before produced, `on_execution` each policy's executed runs."""
    policies = resolve_policies(defs, options.policies)  # a misspelt name fails before any work
    on_step("materializing problems")
    on_done(_rows(materialize_or_fail(defs, 'key:"problems"'), "problems", "problems"))
    sampling = PlanSamplingSettings(n_samples=options.n_samples, problem_limit=options.problem_limit, seed=0)
    executions = orchestrate_policies(
        defs, options.benchmark, policies, sampling, MAIN_JOB_EXECUTION,
        on_start=lambda name: on_step(sampling_step(options.benchmark, name, options.n_samples,
                                                    options.problem_limit)),
        on_done=on_execution)
    with tempfile.TemporaryDirectory() as tmp:
        history, held_out = Path(tmp, "generated-history.jsonl"), Path(tmp, "generated-held-out.jsonl")
        # the history skips the problems the real runs were made on (its benchmarks take turns), and the
        # held-out batch starts after the history's problems: the reward model sees neither
        first_history_problem = 3 * options.problem_limit
        # generated runs: their correctness is drawn from the plan_success_rate truth, so they say they are simulated
        write_jsonl(generate_runs(options.history_runs, seed=1, plans_decide=True,
                                  first_problem=first_history_problem, environment="simulated"), history)
        write_jsonl(generate_runs(options.held_out_problems * options.held_out_samples, seed=2, plans_decide=True,
                                  samples_per_problem=options.held_out_samples, policies=(HELD_OUT_POLICY,),
                                  first_problem=first_history_problem + -(-options.history_runs // 8),
                                  environment="simulated"), held_out)
        on_step(f"ingesting a generated history batch ({options.history_runs} runs)")
        outcomes = _ingested(ingest_files(defs, [history]))
        on_done(_summaries(outcomes))
        on_step("building pairs")
        on_done(_rows(materialize_or_fail(defs, 'key:"pairs"'), "pairs", "pairs"))
        on_step("training a reward model")
        # this field alone: the rest of the training is the settings file's (`loop.reward_model`, `run_settings`)
        trained = materialize_or_fail(defs, 'key:"reward_model"', dg.RunConfig(
            ops={"reward_model": {"config": {"max_train_pairs": options.max_train_pairs}}}))
        on_done(_reward_model_summary(materialization_metadata(trained, "reward_model")))
        on_step("ingesting the executed runs, the example batch and a generated batch on held-out problems")
        held = _ingested(ingest_landed(defs, [e.metadata["landed_batch"] for e in executions]))
        held += _ingested(ingest_files(defs, [EXAMPLE_BATCH, held_out]))
        outcomes += held
        on_done(_summaries(held))
    on_step("scoring every run")
    on_done(_rows(materialize_or_fail(defs, 'key:"rm_scores"'), "rm_scores", "runs scored"))
    on_step("evaluating Best-of-N on the held-out runs (LLM judges on the embedded model)")
    result = materialize_or_fail(defs, 'key:"evaluation"',
                                 dg.RunConfig(ops={"evaluation": from_engine(EvaluationConfig, MAIN_JOB_EVALUATION)}))
    evaluated = materialization_metadata(result, "evaluation")
    on_done("; ".join(part for part in (
        f"{evaluated.get('dagster/row_count', 0)} rows, {evaluated.get('judge_calls', 0)} judge calls",
        _slowest_methods(evaluated.get("seconds_by_method") or {})) if part))
    return outcomes, evaluated["evaluation_id"]


def _rows(result: dg.ExecuteInProcessResult, asset_key: str, what: str) -> str:
    count = materialization_metadata(result, asset_key).get("dagster/row_count")
    return f"{count} {what}" if count is not None else ""


def sampling_step(benchmark: str, policy: str, n_samples: int, problems: int) -> str:
    return (f"{benchmark} x {policy}: sampling {n_samples} plans for {problems} problem{'' if problems == 1 else 's'} "
            f"and executing them")


def _slowest_methods(seconds_by_method: dict, shown: int = 4) -> str:
    slowest = sorted(seconds_by_method.items(), key=lambda item: -item[1])[:shown]
    return "slowest methods: " + ", ".join(f"{name} {duration(seconds)}" for name, seconds in slowest) if slowest else ""


def _summaries(outcomes: list[BatchOutcome]) -> str:
    return "; ".join(f"{o.batch_id}: {o.summary()}" for o in outcomes)


def _reward_model_summary(metadata: dict) -> str:
    champion_of = metadata.get("champion_of") or {}
    return "; ".join(f"version {version}" + (f", champion of {', '.join(domains)}" if domains else ", not a champion")
                     for version, domains in champion_of.items())


def _ingested(outcomes: list[BatchOutcome]) -> list[BatchOutcome]:
    failed = [o for o in outcomes if o.status != "SUCCESS"]
    if failed:
        raise StepFailed("; ".join(f"ingesting {o.batch_id}: {o.status}" for o in failed))
    return outcomes
