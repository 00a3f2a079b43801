"""`orchrm`: what people do without the UI. It runs the same Definitions in-process, on the same Dagster instance as
`dagster dev`, so every run it makes shows up in the UI's history.

One module per command, each imported only when it runs (or when help lists it): `query`, and `status` on a root
where nothing landed, read the warehouse and the storage root without Dagster, torch or transformers, so they answer
in well under a second; `status` on a root with batches asks the loop what it would do (the Dagster instance's runs
and the settings file's loop section, not the Definitions), and `config show` / `check` read every section of the
settings: none of them imports torch, transformers or TRL (the engine's package roots load names lazily, and model
code imports those libraries where it runs; tests/structure/test_cli_imports.py). Flags that set a config field are
generated from it (`options.config_options`).
A user's mistake (an unknown config key, a bad value, an unknown name, a step that failed) prints its message alone;
`--verbose` shows the traceback too."""

from __future__ import annotations

import importlib
import os
import warnings

import click

# Model loads print GGUF de-quantization and "Loading weights" bars (tqdm) and transformers' load report (a warning),
# and trainers print each logged step's metrics; unless --verbose, they are silenced through the environment, which
# in-process runs read when transformers and tqdm are first imported (after this group's callback) and step
# subprocesses inherit (training_logs.quiet_console reads transformers' verbosity). A value a user set is kept.
QUIET_MODEL_LOADS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}

# command -> (its module in this package, which defines `command`; the line `orchrm --help` lists it with: listing
# imports no command, so it answers at once; tests/test_cli_options.py checks each line opens the command's own help)
COMMANDS = {
    "ingest": ("ingest", "Land FILES (.jsonl / .parquet) and ingest and label each as a run batch."),
    "import-traces": ("import_traces", "Import traces (OpenTelemetry GenAI spans, Langfuse or LangSmith exports) as "
                                       "runs."),
    "reingest": ("reingest", "Ingest and label BATCHES again: batch ids, or names of landed files."),
    "materialize": ("materialize", "Materialize asset keys (e.g. `problems labels`) or a Dagster selection string."),
    "query": ("query", "Run one read-only statement (SELECT or EXPLAIN) against the warehouse."),
    "status": ("status", "Batches, their files, runs, quarantined lines and labels, per batch and in total."),
    "export-pairs": ("export_pairs", "Write the pairs reward-model training reads (built and imported) to PATH."),
    "export-scores": ("export_scores", "Send imported traces' labels and champion scores back to their tools."),
    "main": ("main_job", "The main job on the embedded default."),
    "evaluate": ("evaluate", "Best-of-N on held-out problems."),
    "orchestrate": ("orchestrate", "Sample orchestration plans, execute them (with sub-agents, or in a simulated "
                                   "environment), land (and ingest) the runs."),
    "loop": ("loop", "The loop that keeps learning, as the daemon runs it."),
    "ui": ("ui", "Serve the Dagster UI on the same instance the CLI uses."),
    "service": ("service", "Run the loop's daemon and the UI as services (systemd, supervisord, docker compose)."),
    "serve": ("serve", "Serve the champion reward model over HTTP."),
    "config": ("config", "The settings in effect and where each came from (show); validate a settings file (check)."),
}

# what a user got wrong, or a step that failed with its cause: the message says it all (by class name, so that
# telling them apart imports neither Dagster nor pydantic)
_MISTAKES = {"ValueError", "SettingsError", "FileNotFoundError", "DagsterInvalidConfigError", "DagsterInvalidSubsetError",
             "DagsterInvalidDefinitionError", "StepFailed", "LoopFailed", "LockTimeout", "WarehouseBusy"}


class _Commands(click.Group):
    """The commands, each imported when used; a user's mistake as its message alone, unless --verbose."""

    def list_commands(self, ctx) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx, name: str) -> click.Command | None:
        module, _ = COMMANDS.get(name, (None, None))
        return importlib.import_module(f"{__name__}.{module}").command if module else None

    def format_commands(self, ctx, formatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, line) for name, (_, line) in COMMANDS.items()])

    def invoke(self, ctx):
        if not ctx.params.get("verbose"):  # before the command's module is imported: its imports warn too
            _hold_warnings(ctx)
        try:
            return super().invoke(ctx)
        except Exception as error:
            if ctx.params.get("verbose") or not is_mistake(error):
                raise
            if getattr(error, "reported", False):  # a failed step, said by the command's progress
                raise SystemExit(1) from None
            raise click.ClickException(f"{error} (orchrm --verbose ... shows where)") from None


def is_mistake(error: BaseException) -> bool:
    return any(cls.__name__ in _MISTAKES for cls in type(error).__mro__)


@click.group(cls=_Commands)
@click.option("--config", "config_file", envvar="ORCHRM_CONFIG", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="The settings file (default: ./orchrm.yaml when there is one, or $ORCHRM_CONFIG).")
@click.option("--storage", "storage_url", envvar="ORCHRM_STORAGE", default=None,
              help="Storage root: a folder or s3://bucket/prefix (default: ./storage, or $ORCHRM_STORAGE).")
@click.option("--verbose", is_flag=True, help="Show model-load progress bars and load reports, trainers' per-step "
                                               "metrics, and the traceback of an error (silent by default).")
def main(config_file: str | None, storage_url: str | None, verbose: bool) -> None:
    """orchrm: multi-agent run logs -> labels -> pairs -> orchestration reward model."""
    from pathlib import Path

    found = Path(config_file) if config_file else Path("orchrm.yaml") if Path("orchrm.yaml").is_file() else None
    if found is not None:  # by its full path: the UI's code server, run workers and training processes read it too
        os.environ["ORCHRM_CONFIG"] = str(found.resolve())
    if storage_url:
        os.environ["ORCHRM_STORAGE"] = storage_url
    if not verbose:
        for name, value in QUIET_MODEL_LOADS.items():
            os.environ.setdefault(name, value)


def run() -> None:
    """The `orchrm` command (its console script, and `python -m orchrm_dagster.app.cli`): `main`, then the process
    ends without the interpreter's teardown, once the exit handlers ran and the output is flushed. `orchrm loop`
    was once killed by SIGABRT after it had finished and printed everything ("terminate called without an active
    exception", CI of 2026-12-03): a native library's thread or static object torn down at interpreter exit
    (torch, DuckDB, pyarrow and gRPC each keep C++ threads); nothing is left to do by then."""
    import atexit
    import sys

    try:
        main()  # standalone: it always ends with SystemExit
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
        if isinstance(done.code, str):
            print(done.code, file=sys.stderr)
    atexit._run_exitfuncs()  # noqa: SLF001 (logging's flush, temporary folders' removal: what teardown would run)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _hold_warnings(ctx: click.Context) -> None:
    """Libraries' warnings (Dagster's preview notices, say) would print amid the steps' lines: they are held and
    counted in one line at the end, and the step subprocesses' are ignored (a PYTHONWARNINGS a user set is kept);
    --verbose shows them where they happen."""
    held, shown = [], warnings.showwarning
    warnings.showwarning = lambda message, category, *args, **kwargs: held.append(f"{category.__name__}: {message}")
    os.environ.setdefault("PYTHONWARNINGS", "ignore")

    def count() -> None:
        warnings.showwarning = shown
        if held:
            click.echo(f"{len(held)} library warning(s) hidden (orchrm --verbose ... shows them)", err=True)

    ctx.call_on_close(count)
