import dataclasses

import click

from orchrm_dagster.app.cli.common import console, definitions, execution_summary, ingest_callbacks, print_outcomes
from orchrm_dagster.app.cli.environment import environment_options, in_chosen_environment
from orchrm_dagster.app.cli.options import apply_options, config_options, given
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.reporting import step_progress


@click.command(name="orchestrate")
@click.option("--benchmark", default="gsm8k", show_default=True, help="A benchmark of the problems table.")
@click.option("--policy", "policy_names", multiple=True,
              help="Policy name(s), a configured one or a checkpoint (grpo-rNNNN); default or `all`: every configured "
                   "policy.")
@config_options(PlanSamplingSettings, "problem_limit", "n_samples", "seed",
                flags={"problem_limit": "--problems", "n_samples": "--samples"})
@config_options(ExecutionSettings, "best_of_n", flags={"best_of_n": "--best-of"},
                shown={"best_of_n": "off: every sampled plan executes"})
@click.option("--ingest/--no-ingest", default=True, show_default=True, help="Ingest and label the landed runs.")
@environment_options
@click.pass_context
def command(ctx: click.Context, benchmark: str, policy_names: tuple[str, ...], ingest: bool, **_) -> None:
    """Sample orchestration plans, execute them (with sub-agents, or in a simulated environment), land (and ingest)
    the runs. With --best-of N: Best-of-N before rollout: N plans per problem at least, the champion reward model
    scores them, and only the best of each problem is executed."""
    from orchrm_dagster.app.commands import ingest_landed
    from orchrm_dagster.app.main_job import orchestrate_policies, resolve_policies, sampling_step

    from orchrm_dagster.settings import load_settings

    settings = load_settings()
    best_of = given(ctx, ExecutionSettings).get("best_of_n")
    execution = in_chosen_environment(apply_options(settings.execution, ctx, **(
        {"selection": "orchrm_bon"} if best_of else {})), ctx)
    sampling = apply_options(settings.sampling, ctx)
    sampling = dataclasses.replace(sampling, n_samples=max(sampling.n_samples, best_of or 0))
    defs = definitions()
    with step_progress(console) as progress:
        executions = orchestrate_policies(
            defs, benchmark, resolve_policies(defs, policy_names), sampling, execution,
            on_start=lambda name: progress.step(sampling_step(benchmark, name, sampling.n_samples,
                                                              sampling.problem_limit)),
            on_done=lambda done: progress.finish(execution_summary(done)))
        outcomes = (ingest_landed(defs, [e.metadata["landed_batch"] for e in executions], **ingest_callbacks(progress))
                    if ingest else [])
    if outcomes:
        print_outcomes(outcomes)
