"""--environment and --truth, the same on every command that executes plans, generated from ExecutionSettings."""

import click

from orchrm_dagster.app.cli.options import config_options, given
from orchrm_dagster.orchestration import ExecutionSettings

TRUTH = "environment_settings.simulated.truth"

environment_options = config_options(ExecutionSettings, "environment", TRUTH, flags={TRUTH: "--truth"})


def in_chosen_environment(settings, ctx: click.Context):
    """`settings` (ExecutionSettings, or LoopSettings: its rollouts and rounds alike) executing plans where the flags
    say (a truth alone: the simulated environment, the only one a truth function decides)."""
    chosen = given(ctx, ExecutionSettings)
    environment, truth = chosen.get("environment"), chosen.get(TRUTH)
    if truth is not None and environment not in (None, "simulated"):
        raise click.BadParameter("--truth applies to --environment simulated", param_hint="--truth")
    return settings.in_environment(environment, truth)
