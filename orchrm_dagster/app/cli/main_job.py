import click

from orchrm_dagster.app.cli.common import (console, definitions, execution_summary, print_evaluation, print_outcomes,
                                           print_reward_model_summary)
from orchrm_dagster.app.cli.options import apply_options, config_options
from orchrm_dagster.settings import MainJobOptions, load_settings
from orchrm_dagster.reporting import step_progress


@click.command(name="main")
@config_options(MainJobOptions, "benchmark", "policies", "problem_limit", "n_samples", "history_runs",
                "max_train_pairs", flags={"policies": "--policy", "problem_limit": "--problems",
                                          "n_samples": "--samples"})
@click.pass_context
def command(ctx: click.Context, **_) -> None:
    """The main job on the embedded default: problems; real MAS runs from the embedded model (the few-shot policy;
    --policy chooses); the example batch and a generated history batch; labels; pairs; a reward model; held-out
    runs; scores of every run; the Best-of-N evaluation table."""
    from orchrm_dagster.app.cli.status import command as status
    from orchrm_dagster.app.main_job import run_main_job

    options = apply_options(load_settings().main, ctx)
    with step_progress(console) as progress:
        progress.step("loading the code location (Definitions)")
        defs = definitions()
        outcomes, evaluation_id = run_main_job(
            defs, options, on_step=progress.step, on_done=progress.finish,
            on_execution=lambda done: progress.finish(execution_summary(done)))
    print_outcomes(outcomes)
    ctx.invoke(status)
    print_reward_model_summary()
    print_evaluation(evaluation_id)
    console.print(f"every row: orchrm query \"select * from evaluation where evaluation_id = '{evaluation_id}'\"",
                  soft_wrap=True)
