import re
import sys
from pathlib import Path

import click

from orchrm_dagster.app.cli.common import console, definitions
from orchrm_dagster.reporting import step_progress

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


@click.command(name="materialize")
@click.argument("selection", nargs=-1, required=True)
@click.option("--partition", "partition_key", default=None,
              help="Partition key: a run batch, or benchmark|policy for the orchestration assets "
                   "(e.g. gsm8k|smollm2-base).")
@click.option("--config", "config_file", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run config as YAML or JSON, as the UI's launchpad takes it (ops: {asset: {config: {...}}}).")
def command(selection: tuple[str, ...], partition_key: str | None, config_file: Path | None) -> None:
    """Materialize asset keys (e.g. `problems labels`) or a Dagster selection string (e.g. `group:labels`)."""
    from assets.runs import failure_cause
    from orchrm_dagster.app.commands import materialize_selection, register_orchestration_partitions

    text = " or ".join(f'key:"{s}"' if _PLAIN_KEY.match(s) else f"({s})" for s in selection)
    defs = definitions()
    if partition_key and "|" in partition_key:
        register_orchestration_partitions(defs)
    run_config = _run_config(config_file)
    with step_progress(console) as progress:
        progress.step(f"materializing {text}" + (f" (partition {partition_key})" if partition_key else ""))
        result = materialize_selection(defs, text, partition_key, run_config)
        if result.success:
            progress.finish(f"run {result.run_id}: SUCCESS")
        else:
            progress.fail(f"run {result.run_id}: " + failure_cause(result.all_events))
    if not result.success:
        sys.exit(1)
    from assets.training_logs import logged_trainings

    for asset, where in logged_trainings(result):
        console.print(f"{asset}: training logs in {where}", soft_wrap=True)


def _run_config(config_file: Path | None) -> dict | None:
    if config_file is None:
        return None
    import yaml

    try:
        config = yaml.safe_load(config_file.read_text())
    except yaml.YAMLError as err:
        raise click.BadParameter(f"{config_file}: not YAML or JSON: {err}", param_hint="--config") from err
    if not isinstance(config, dict):
        raise click.BadParameter(f"{config_file}: run config must be a mapping (ops: ...)", param_hint="--config")
    return config
