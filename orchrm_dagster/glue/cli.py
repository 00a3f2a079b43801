"""`orchrm`: what people do without the UI. It runs the same Definitions in-process, on the same
Dagster instance as `dagster dev`, so every run it makes shows up in the UI's history.

Only click, rich and what a command needs are imported: `query` and `status` read the warehouse and the storage root
without Dagster, torch or transformers (tests/structure/test_cli_imports.py), so they answer in well under a second."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from orchrm_dagster.glue.main_job_options import MainJobOptions
from orchrm_dagster.reporting import step_progress

console = Console(width=None if sys.stdout.isatty() else 220)  # piped or captured: wide tables, not folded cells
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


def _definitions():
    from orchrm_dagster.definitions import build_definitions

    return build_definitions()  # built now, so --storage / ORCHRM_STORAGE given to this command apply


def _storage():
    """The storage root and warehouse the Definitions' `storage` resource has (its root: --storage, ORCHRM_STORAGE or
    ./storage, by `default_storage_url`), without building the Definitions."""
    from orchrm_dagster.storage import StorageSettings, default_storage_url

    return StorageSettings(root=default_storage_url())


# Model loads print GGUF de-quantization and "Loading weights" bars (tqdm) and transformers' load report (a warning),
# and trainers print each logged step's metrics; unless --verbose, they are silenced through the environment, which
# in-process runs read when transformers and tqdm are first imported (after this group's callback) and step
# subprocesses inherit (training_logs.quiet_console reads transformers' verbosity). A value a user set is kept.
QUIET_MODEL_LOADS = {"TQDM_DISABLE": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1", "TRANSFORMERS_VERBOSITY": "error"}


@click.group()
@click.option("--storage", "storage_url", envvar="ORCHRM_STORAGE", default=None,
              help="Storage root: a folder or s3://bucket/prefix (default: ./storage, or $ORCHRM_STORAGE).")
@click.option("--verbose", is_flag=True, help="Show model-load progress bars and load reports, and trainers' "
                                               "per-step metrics (silent by default).")
def main(storage_url: str | None, verbose: bool) -> None:
    """orchrm: multi-agent run logs -> labels -> pairs -> orchestration reward model."""
    if storage_url:
        os.environ["ORCHRM_STORAGE"] = storage_url
    if not verbose:
        for name, value in QUIET_MODEL_LOADS.items():
            os.environ.setdefault(name, value)


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ingest(files: tuple[Path, ...]) -> None:
    """Land FILES (.jsonl / .parquet) and ingest and label each as a run batch."""
    from orchrm_dagster.glue.commands import ingest_files

    with step_progress(console, total=len(files)) as progress:
        outcomes = ingest_files(_definitions(), list(files), **_ingest_callbacks(progress))
    _print_outcomes(outcomes)
    if not all(o.ok for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("batches", nargs=-1, required=True)
def reingest(batches: tuple[str, ...]) -> None:
    """Ingest and label BATCHES again: batch ids, or names of landed files (each file's batch, read whole again:
    what a failed file or batch needs once its cause is fixed). The loop's own ingest step, so the loop sees it
    done."""
    from orchrm_dagster.glue.commands import ingest_batches, resolve_batches

    defs = _definitions()
    root = defs.resources["storage"].storage_root()
    found, unknown = resolve_batches(root, list(batches))
    if unknown:
        raise click.BadParameter(f"no batch and no file in {root.uri('landing')} of that name: {', '.join(unknown)}",
                                 param_hint="BATCHES")
    with step_progress(console, total=len(set(found))) as progress:
        outcomes = ingest_batches(defs, found, **_ingest_callbacks(progress))
    _print_outcomes(outcomes)
    if not all(o.ok for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("selection", nargs=-1, required=True)
@click.option("--partition", "partition_key", default=None,
              help="Partition key: a run batch, or benchmark|policy for the orchestration assets (e.g. gsm8k|smollm2-base).")
@click.option("--config", "config_file", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run config as YAML or JSON, as the UI's launchpad takes it (ops: {asset: {config: {...}}}).")
def materialize(selection: tuple[str, ...], partition_key: str | None, config_file: Path | None) -> None:
    """Materialize asset keys (e.g. `problems labels`) or a Dagster selection string (e.g. `group:labels`)."""
    from orchrm_dagster.glue.commands import failure_messages, materialize_selection, register_orchestration_partitions

    text = " or ".join(f'key:"{s}"' if _PLAIN_KEY.match(s) else f"({s})" for s in selection)
    defs = _definitions()
    if partition_key and "|" in partition_key:
        register_orchestration_partitions(defs)
    with step_progress(console) as progress:
        progress.step(f"materializing {text}" + (f" (partition {partition_key})" if partition_key else ""))
        result = materialize_selection(defs, text, partition_key, _run_config(config_file))
        if result.success:
            progress.finish(f"run {result.run_id}: SUCCESS")
        else:
            progress.fail(f"run {result.run_id}: " + "; ".join(failure_messages(result)))
    if not result.success:
        sys.exit(1)
    from orchrm_dagster.glue.training_logs import logged_trainings

    for asset, where in logged_trainings(result):
        console.print(f"{asset}: training logs in {where}", soft_wrap=True)


@main.command()
@click.argument("statement")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table")
def query(statement: str, fmt: str) -> None:
    """Run one read-only statement (SELECT or EXPLAIN) against the warehouse: tables problems, runs, subagent_calls,
    labels, quarantine, pairs, rm_checkpoints, rm_scores, evaluation, grpo_rounds, ... It cannot write, attach,
    install or load extensions, copy to files, change settings, or read files outside the storage root."""
    import duckdb

    from orchrm_dagster.storage import NotAReadStatement, check_read_only

    try:
        check_read_only(statement)
        with _storage().warehouse().connect_sandboxed() as con:
            cursor = con.execute(statement)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchall()
    except (duckdb.Error, FileNotFoundError, NotAReadStatement) as err:
        raise click.ClickException(str(err)) from err
    if fmt == "json":
        click.echo(json.dumps([dict(zip(columns, r)) for r in rows], default=str, indent=2))
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")  # LF, as DuckDB's own CLI writes (csv's default: CRLF)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        _print_rows(columns, rows, rounded=False)  # a user's query shows its values as they are


@main.command()
def status() -> None:
    """Batches, their files, runs, quarantined lines and labels, per batch and in total; each batch's ingest state (a
    failed one with the cause of its latest run, a file its ingest could not read with why, until it is
    re-ingested); the landed files no batch holds yet; and the files whose lines were quarantined, each with its
    first bad line."""
    import sql

    storage = _storage()
    warehouse = storage.warehouse()
    states, pending = _batch_states(storage.storage_root())
    if not warehouse.exists() and not states and not pending:
        raise click.ClickException(f"nothing landed or ingested yet under {storage.storage_root().url}")
    rows = warehouse.query(sql.load("batch_status")).to_pylist() if warehouse.exists() else []
    counts = ["runs", "quarantined", "labeled", "correct"]
    by_batch = {batch: dict.fromkeys(counts, 0) for batch in states} | {r["batch_id"]: r for r in rows}
    table = []
    for batch in sorted(by_batch):  # a batch whose files left the landing zone was ingested, or it would not be here
        files, state, cause = states.get(batch, ("", "ingested", ""))
        table.append([batch, files, *(by_batch[batch][c] for c in counts), state, cause])
    if pending:
        table.append(["(no batch yet)", pending, 0, 0, 0, 0, "landed", "the loop cuts them into a batch"])
    totals = ["total", sum(row[1] or 0 for row in table)] + [sum(row[c] for row in by_batch.values())
                                                             for c in counts] + ["", ""]
    _print_rows(["batch_id", "files", *counts, "state", "cause"], table + [totals],
                caption=f"Batches under {storage.storage_root().url}: landed files, runs ingested, lines "
                        f"quarantined, runs labeled and labeled correct; state: the batch's ingest")
    failed = [state for _, state, _ in states.values() if "failed" in state]
    if failed:
        console.print(f"[red]{len(failed)} batch(es) failed to ingest, or have files that could not be read; "
                      f"re-ingest with `orchrm reingest FILE` (or BATCH) once the cause is fixed, or land the file "
                      f"again[/red]", soft_wrap=True)
    if warehouse.exists():
        _print_quarantined_files(warehouse)
        _print_environments(warehouse)
        _print_round_verdicts(warehouse)


def _print_quarantined_files(warehouse) -> None:
    """Each file whose lines were quarantined: how many, and its first bad line (file:line: why)."""
    import sql

    rows = warehouse.query(sql.load("quarantined_files")).to_pylist()
    if rows:
        _print_rows(["file", "batch_id", "quarantined", "first bad line"],
                    [[r["source_file"], r["batch_id"], r["quarantined"], r["first_reason"]] for r in rows],
                    caption="Files with quarantined lines (orchrm query \"select * from quarantine\" for every line)")


def _print_environments(warehouse) -> None:
    """A line per simulated environment and truth function the runs were executed in, as their meta records it (the
    warehouse alone: status imports no model code)."""
    rows = warehouse.query(
        "select environment, json_extract_string(meta, '$.simulated_truth') AS truth, count(*) AS runs from runs "
        "where truth is not null group by all order by all").to_pylist()
    for row in rows:
        console.print(f"[yellow]SIMULATED: {row['runs']} run(s) executed in the {row['environment']} environment, not "
                      f"by real sub-agents, correctness drawn by the {row['truth']} truth function: every figure made "
                      f"from them is simulated[/yellow]", soft_wrap=True)


def _print_round_verdicts(warehouse) -> None:
    """The policy gate's latest verdict, and every round flagged as suspected reward hacking."""
    rows = warehouse.query("select round, verdict, promoted, reason, environment, truth, reward_hacking "
                           "from grpo_rounds order by round").to_pylist()
    if not rows:
        return
    latest = rows[-1]
    where = (f" (held-out plans executed in the {latest['environment']} environment, truth {latest['truth']}: "
             f"SIMULATED)" if latest["truth"] else "")
    verdict = latest["verdict"] or ("promoted" if latest["promoted"] else "not promoted")
    console.print(f"round {latest['round']}{where}: {verdict}: {latest['reason']}", soft_wrap=True)
    for row in rows:
        if row["reward_hacking"]:
            console.print(f"[red]round {row['round']}: suspected reward hacking, not promoted: {row['reason']}[/red]",
                          soft_wrap=True)


def _batch_states(root) -> tuple[dict[str, tuple[int, str, str]], int]:
    """(batch id -> (landed files, state, cause) of each batch (`orchrm_dagster.loop.batch_states`), landed files no
    batch holds yet). Only a batch not ingested needs the loop and the Dagster instance (a run in flight, or why its
    runs failed); when every batch is ingested, neither is imported."""
    from orchrm_dagster.storage import ingested_state, landing_view

    landing = landing_view(root)
    if all(view.ingested for view in landing.batches):
        return {v.batch_id: (len(v.names), *ingested_state(len(v.names), v.failed_files))
                for v in landing.batches}, len(landing.pending)
    from orchrm_dagster.glue.instance import cli_instance
    from orchrm_dagster.glue.loop import loop_state
    from orchrm_dagster.loop import batch_states

    files = {v.batch_id: len(v.names) for v in landing.batches}
    return ({s.batch_id: (files.get(s.batch_id, 0), s.state, s.cause)
             for s in batch_states(loop_state(cli_instance(), root))}, len(landing.pending))


@main.command(name="export-pairs")
@click.argument("path")
@click.option("--format", "fmt", default=None, metavar="jsonl|parquet", help="Default: from PATH's suffix.")
@click.option("--source", "sources", multiple=True, help="Only pairs of this source (repeatable), e.g. "
              "correct_over_incorrect: the pairs a from-scratch GRPO recipe's reward model trains on.")
@click.option("--split", "splits", multiple=True, metavar="train|validation", help="Only this split (repeatable).")
def export_pairs_command(path: str, fmt: str | None, sources: tuple[str, ...], splits: tuple[str, ...]) -> None:
    """Write the pairs reward-model training reads (built and imported) to PATH, a local file or s3:// URL, in the
    published OrchRM format (input, chosen, rejected, source), JSONL or Parquet; `import_files` reads it back."""
    from orchrm_dagster.pairs import export_pairs

    try:
        count = export_pairs(_storage().storage_root(), path, fmt, sources, splits)
    except (ValueError, OSError) as err:
        raise click.ClickException(str(err)) from err
    click.echo(f"{count} pairs -> {path}")


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


@main.command(name="main")
@click.option("--benchmark", default=MainJobOptions.benchmark, show_default=True)
@click.option("--policy", "policies", multiple=True, default=MainJobOptions.policies, show_default=True,
              help="Policy whose plans are sampled and executed (repeatable), a configured one or a checkpoint; "
                   "--policy all: every configured one.")
@click.option("--problems", "problem_limit", default=MainJobOptions.problem_limit, show_default=True)
@click.option("--samples", "n_samples", default=MainJobOptions.n_samples, show_default=True)
@click.option("--history-runs", default=MainJobOptions.history_runs, show_default=True,
              help="Runs in the generated history batch the first reward model learns from.")
@click.option("--max-train-pairs", default=MainJobOptions.max_train_pairs, show_default=True)
def main_job(benchmark: str, policies: tuple[str, ...], problem_limit: int, n_samples: int, history_runs: int,
             max_train_pairs: int) -> None:
    """The main job on the embedded default: problems; real MAS runs from the embedded model (the few-shot policy;
    --policy chooses); the example batch and a generated history batch; labels; pairs; a reward model; held-out
    runs; scores of every run; the Best-of-N evaluation table."""
    from orchrm_dagster.glue.main_job import run_main_job

    options = MainJobOptions(benchmark=benchmark, policies=tuple(policies), problem_limit=problem_limit,
                             n_samples=n_samples, history_runs=history_runs, max_train_pairs=max_train_pairs)
    with step_progress(console) as progress:
        progress.step("loading the code location (Definitions)")
        defs = _definitions()
        outcomes, evaluation_id = _or_exit(lambda: run_main_job(
            defs, options, on_step=progress.step, on_done=progress.finish,
            on_execution=lambda done: progress.finish(_execution_summary(done))))
    _print_outcomes(outcomes)
    click.get_current_context().invoke(status)
    _print_reward_model_summary()
    _print_evaluation(evaluation_id)
    console.print(f"every row: orchrm query \"select * from evaluation where evaluation_id = '{evaluation_id}'\"",
                  soft_wrap=True)


def _print_reward_model_summary() -> None:
    # select *: a table written before champions were per domain lacks the domain columns
    rows = _storage().warehouse().query("select * from rm_checkpoints order by version").to_pylist()
    table = [(r["version"], ", ".join(r.get("domains") or ()),
              ", ".join(r.get("champion_of") or ()) or ("every domain" if r["is_champion"] else ""),
              r["n_train_pairs"], r["n_validation_pairs"], _rounded(r["val_accuracy"]),
              _by_domain(r.get("val_accuracy_by_domain"))) for r in rows]
    _print_rows(["rm version", "domains", "champion of", "train pairs", "validation pairs", "val accuracy",
                 "val accuracy by domain"], table,
                caption="Reward-model versions: the pairs each trained and was validated on, and its accuracy on the "
                        "validation pairs (all, and by domain)")
    from orchrm_dagster.rm import champion_refusals

    # scoring, Best-of-N, the rounds and `orchrm serve` refuse these domains until a version beats chance there
    for domain, why in champion_refusals(_storage().storage_root()).items():
        console.print(f"[yellow]{domain}: {why}[/yellow]", soft_wrap=True)


def _rounded(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def _by_domain(accuracies: str | None) -> str:
    return ", ".join(f"{domain} {value:.3f}" for domain, value in json.loads(accuracies or "{}").items())


def _evaluation_methods() -> dict:
    from orchrm_dagster.evaluation import registered_methods

    return registered_methods()


class _MethodList(click.ParamType):
    """Comma-separated evaluation methods, each one the registry holds (else click's usage error)."""

    name = "methods"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        names = tuple(part.strip() for part in value.split(",") if part.strip())
        known = _evaluation_methods()
        for name in names:
            if name not in known:
                self.fail(f"unknown method {name!r}; choose from {', '.join(known)}", param, ctx)
        return names


def _methods_epilog() -> str:
    lines = [f"  {m.name}: {m.description} [executes {'all N' if m.executes_all else 'one'}"
             f"{'; needs an LLM backend' if m.needs_llm else ''}]" for m in _evaluation_methods().values()]
    return "\b\nMethods:\n" + "\n".join(lines)  # \b: click keeps the lines as they are


class _LazyEpilogCommand(click.Command):
    """A command whose epilog is written (from a registry) when its help is shown, not when the CLI is imported."""

    def __init__(self, *args, epilog_from, **kwargs):
        super().__init__(*args, **kwargs)
        self.epilog_from = epilog_from

    def format_epilog(self, ctx, formatter) -> None:
        self.epilog = self.epilog_from()
        super().format_epilog(ctx, formatter)


class _LazyHelpOption(click.Option):
    """An option whose help is written (from a registry) when help is shown, not when the CLI is imported."""

    def __init__(self, *args, help_from, **kwargs):
        super().__init__(*args, **kwargs)
        self.help_from = help_from

    def get_help_record(self, ctx):
        self.help = self.help_from()
        return super().get_help_record(ctx)


@main.command(name="evaluate", cls=_LazyEpilogCommand, epilog_from=_methods_epilog)
@click.option("--benchmark", "benchmarks", multiple=True, help="Only this benchmark (repeatable).")
@click.option("--policy", "policies", multiple=True, help="Only this policy (repeatable).")
@click.option("--methods", type=_MethodList(), default=None, cls=_LazyHelpOption,
              help_from=lambda: "Comma-separated methods (default: all): " + ", ".join(_evaluation_methods()) + ".")
@click.option("--n", "ns", default="1,2,4,8", show_default=True, help="Comma-separated candidate-set sizes N.")
@click.option("--judge-draws", type=click.IntRange(min=1), default=None,
              help="Candidate sets each LLM judge sees per problem and N (each one call, cached).")
@click.option("--judge-n", "judge_ns", default="", help="Comma-separated N at which the LLM judges run (default: "
                                                       "every --n); their calls grow with each N.")
def evaluate_command(benchmarks, policies, methods, ns, judge_draws, judge_ns) -> None:
    """Best-of-N on held-out problems: materialize `evaluation` and print its table and where its plots are."""
    import dagster as dg
    import pydantic

    from orchrm_dagster.evaluation import EvaluationSettings, JudgeSettings
    from orchrm_dagster.glue.commands import materialization_metadata
    from orchrm_dagster.glue.config_bridge import from_engine
    from orchrm_dagster.glue.main_job import materialize_or_fail
    from orchrm_dagster.glue.run_configs import EvaluationConfig

    chosen: dict = {"benchmarks": tuple(benchmarks), "policies": tuple(policies), "ns": tuple(_int_list(ns, "--n"))}
    if methods:
        chosen["methods"] = methods
    judge = {"draws": judge_draws} if judge_draws else {}
    if judge_ns:
        judge["ns"] = tuple(_int_list(judge_ns, "--judge-n"))
    try:
        if judge:
            chosen["judge"] = JudgeSettings(**judge)
        settings = EvaluationSettings(**chosen)
    except (pydantic.ValidationError, ValueError) as err:
        raise click.BadParameter(str(err)) from err
    run_config = dg.RunConfig(ops={"evaluation": from_engine(EvaluationConfig, settings)})
    with step_progress(console) as progress:
        progress.step("evaluating Best-of-N on the held-out runs")
        result = _or_exit(lambda: materialize_or_fail(_definitions(), 'key:"evaluation"', run_config))
    metadata = materialization_metadata(result, "evaluation")
    _print_evaluation(metadata["evaluation_id"])
    if metadata.get("notes", "none") != "none":  # what was left out, and why
        console.print(str(metadata["notes"]), soft_wrap=True)
    for name in ("accuracy_vs_n_file", "accuracy_vs_tokens_file"):
        if name in metadata:
            console.print(f"{name.removesuffix('_file').replace('_', ' ')}: {metadata[name]}", soft_wrap=True)


def _rewards_help() -> str:
    from orchrm_dagster.grpo import reward_kinds

    listed = "; ".join(f"{name}: {kind.description}" for name, kind in reward_kinds().items())
    return (f"Comma-separated rewards of a sampled plan, summed (default: the loop resource's round config, "
            f"orchrm). {listed}.")


def _reward_names(ctx, param, text: str | None) -> tuple[str, ...] | None:
    from orchrm_dagster.grpo import reward_kinds

    if text is None:
        return None
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [name for name in names if name not in reward_kinds()]
    if unknown or not names:
        raise click.BadParameter(f"{', '.join(unknown) or text!r}: choose from {', '.join(reward_kinds())}")
    return names


def _float_list(ctx, param, text: str | None) -> tuple[float, ...] | None:
    try:
        return None if text is None else tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise click.BadParameter(f"{text!r}: comma-separated numbers expected") from err


def _method_help() -> str:
    from orchrm_dagster.grpo.methods import registered_methods

    listed = "; ".join(f"{name}: {method.description}" for name, method in registered_methods().items())
    return f"How each round trains the policy (default: the loop resource's round config, grpo). {listed}."


def _method_names() -> list[str]:
    from orchrm_dagster.grpo.methods import method_names

    return list(method_names())


def _environment_names() -> list[str]:
    from orchrm_dagster.environments import environment_names

    return list(environment_names())


def _environment_help() -> str:
    from orchrm_dagster.environments import environments

    listed = "; ".join(f"{name}: {entry.description}" for name, entry in environments().items())
    return f"Where plans execute and where their correctness comes from (default: agents). {listed}."


def _truth_names() -> list[str]:
    from orchrm_dagster.truths import truth_names

    return list(truth_names())


def _truth_help() -> str:
    from orchrm_dagster.truths import truths

    listed = "; ".join(f"{name}: {truth.description}" for name, truth in truths().items())
    return f"With --environment simulated: what decides a plan's correctness (default: plan_success_rate). {listed}."


def _environment_options(command):
    """--environment and --truth, the same on every command that executes plans."""
    command = click.option("--truth", type=_RegistryChoice(_truth_names), default=None, cls=_LazyHelpOption,
                           help_from=_truth_help)(command)
    return click.option("--environment", type=_RegistryChoice(_environment_names), default=None,
                        cls=_LazyHelpOption, help_from=_environment_help)(command)


class _RegistryChoice(click.ParamType):
    """One of the names a registry holds, read when the option is used or its help shown (not at import)."""

    name = "choice"

    def __init__(self, names):
        self.names = names

    def get_metavar(self, param, ctx=None) -> str:
        return "[" + "|".join(self.names()) + "]"

    def convert(self, value, param, ctx):
        if value not in self.names():
            self.fail(f"{value!r} is not one of {', '.join(self.names())}", param, ctx)
        return value


@main.command(name="orchestrate")
@click.option("--benchmark", default="gsm8k", show_default=True, help="A benchmark of the problems table.")
@click.option("--policy", "policy_names", multiple=True,
              help="Policy name(s), a configured one or a checkpoint (grpo-rNNNN); default or `all`: every configured "
                   "policy.")
@click.option("--problems", "problem_limit", default=4, show_default=True, help="The first N problems.")
@click.option("--samples", "n_samples", default=2, show_default=True, help="Plans per problem.")
@click.option("--seed", default=0, show_default=True)
@click.option("--best-of", "best_of", type=click.IntRange(min=1), default=None,
              help="Best-of-N before rollout: sample N plans per problem (at least), let the champion reward model "
                   "score them, and execute only the best of each problem.")
@click.option("--ingest/--no-ingest", default=True, show_default=True, help="Ingest and label the landed runs.")
@_environment_options
def orchestrate_command(benchmark, policy_names, problem_limit, n_samples, seed, best_of, ingest, environment,
                        truth) -> None:
    """Sample orchestration plans, execute them (with sub-agents, or in a simulated environment), land (and ingest)
    the runs."""
    from orchrm_dagster.glue.commands import ingest_landed
    from orchrm_dagster.glue.main_job import orchestrate_policies, resolve_policies, sampling_step

    from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings

    defs = _definitions()
    if best_of:
        n_samples = max(n_samples, best_of)
    sampling = PlanSamplingSettings(n_samples=n_samples, problem_limit=problem_limit, seed=seed)
    execution = ExecutionSettings(selection="orchrm_bon", best_of_n=best_of) if best_of else ExecutionSettings()
    if truth is not None and environment not in (None, "simulated"):
        raise click.BadParameter("--truth applies to --environment simulated", param_hint="--truth")
    execution = execution.in_environment(environment, truth)
    with step_progress(console) as progress:
        executions = _or_exit(lambda: orchestrate_policies(
            defs, benchmark, resolve_policies(defs, policy_names), sampling, execution,
            on_start=lambda name: progress.step(sampling_step(benchmark, name, n_samples, problem_limit)),
            on_done=lambda done: progress.finish(_execution_summary(done))))
        outcomes = (ingest_landed(defs, [e.metadata["landed_batch"] for e in executions], **_ingest_callbacks(progress))
                    if ingest else [])
    if outcomes:
        _print_outcomes(outcomes)


@main.command(name="loop")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="GRPO rounds to run now: the loop goes on until it has run this many more.")
@click.option("--method", type=_RegistryChoice(_method_names), default=None, cls=_LazyHelpOption,
              help_from=_method_help)
@click.option("--rewards", callback=_reward_names, default=None, metavar="NAME[,NAME...]", cls=_LazyHelpOption,
              help_from=_rewards_help)
@click.option("--reward-weights", callback=_float_list, default=None, metavar="W[,W...]",
              help="One weight > 0 per reward of --rewards (default: 1 each).")
@click.option("--start", type=click.Choice(["continue", "scratch"]), default=None,
              help="continue: from the specialized policy, the reward model on every pair; scratch: MAS-Orchestra's "
                   "from-scratch recipe: from the base policy, the reward model retrained on correct-over-incorrect "
                   "pairs only; rounds continue from the last promoted checkpoint of the same recipe (default: the "
                   "loop resource's round.start).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="GRPO steps per round.")
@click.option("--group-size", type=click.IntRange(min=2), default=None, help="Plans per problem and step.")
@click.option("--token-budget", type=click.IntRange(min=1), default=None,
              help="Stop between rounds once the rounds' generation, reward and rollout tokens reach this.")
@click.option("--retrain-min-new-pairs", type=click.IntRange(min=0), default=None,
              help="Retrain the reward model once this many pairs arrived since it last trained.")
@click.option("--heldout-problems", type=click.IntRange(min=1), default=None,
              help="Held-out problems the policy gate executes plans of (default: the round config's, 32).")
@click.option("--heldout-samples", type=click.IntRange(min=1), default=None,
              help="Plans per held-out problem (default: the round config's, 4).")
@_environment_options
def loop_command(rounds, method, rewards, reward_weights, start, steps, group_size, token_budget,
                 retrain_min_new_pairs, heldout_problems, heldout_samples, environment, truth) -> None:
    """The loop that keeps learning, as the daemon runs it: the same decisions and the same runs as the loop's
    sensors (ingest what landed, rebuild pairs, retrain the reward model when enough new pairs arrived, score,
    roll out the last promoted checkpoint, start the next GRPO round), run here in-process until ROUNDS more rounds
    are done; then the rounds table."""
    import dataclasses

    import pydantic

    from orchrm_dagster.glue.loop import LoopFailed, drive
    from orchrm_dagster.loop import rounds as finished_rounds

    defs = _definitions()
    root = defs.resources["storage"].storage_root()
    loop = defs.resources["loop"].to_engine()
    before = len(finished_rounds(root))
    round_changes = {key: value for key, value in (("method", method), ("rewards", rewards),
                                                   ("reward_weights", reward_weights),
                                                   ("start", start), ("steps", steps), ("group_size", group_size),
                                                   ("heldout_problems", heldout_problems),
                                                   ("heldout_samples", heldout_samples))
                     if value is not None}
    if rewards is not None and reward_weights is None:
        round_changes["reward_weights"] = ()  # the configured weights belong to the configured rewards
    changes = {key: value for key, value in (("token_budget", token_budget),
                                             ("retrain_min_new_pairs", retrain_min_new_pairs)) if value is not None}
    try:
        loop = dataclasses.replace(loop, rounds=before + rounds,
                                   round=dataclasses.replace(loop.round, **round_changes), **changes)
        if truth is not None and environment not in (None, "simulated"):
            raise ValueError("--truth applies to --environment simulated")
        loop = loop.in_environment(environment, truth)
    except (pydantic.ValidationError, ValueError) as err:
        raise click.BadParameter(str(err)) from err
    with step_progress(console, total=rounds) as progress:

        def on_step(step) -> None:
            progress.step(f"{step.kind}: {step.key} ({step.why})"
                          + (f", attempt {step.attempt + 1}" if step.attempt else ""))

        def on_decision(decision) -> None:
            progress.finish()
            done = len(finished_rounds(root)) - before
            if done > progress.completed:
                progress.note(f"{done} of {rounds} rounds done")
                progress.advance(done - progress.completed)
            for key, cause in decision.failed:
                progress.note(f"gave up on {key}: {cause}")

        try:
            decision = drive(defs, loop, on_step=on_step, on_decision=on_decision)
        except LoopFailed as err:
            raise click.ClickException(str(err)) from err
    console.print(f"the loop stopped: {decision.stopped}", soft_wrap=True)
    _print_grpo_rounds()


def _print_grpo_rounds() -> None:
    from orchrm_dagster.grpo import read_table, rounds_table

    rows = read_table(_storage().storage_root(), "grpo_rounds")
    headers, table = rounds_table(rows)
    confidence = f"{rows[-1]['confidence']:.0%}" if rows and rows[-1].get("confidence") else "95%"
    _print_rows(headers, [list(row) for row in table],
                caption=f"GRPO rounds: mean reward and KL of the last step; held-out reward (champion's mean score) "
                        f"and accuracy (executed, correct/plans) before and after, {confidence} intervals; "
                        f"difference: the interval of accuracy after - before the gate decided on; tokens are counts "
                        f"(generation, reward model, rollout, training). A SIMULATED environment drew correctness from "
                        f"a truth function. Why each verdict: orchrm query \"select round, reason from grpo_rounds\"")


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise click.BadParameter(f"{text!r}: comma-separated integers expected", param_hint=option) from err


def _print_evaluation(evaluation_id: str) -> None:
    """The table the UI shows as the evaluation's `at_n_<N>` (one function makes both), captioned."""
    from orchrm_dagster.evaluation import AT_N_HEADERS, at_largest_n

    rows = _storage().warehouse().query("select * from evaluation where evaluation_id = $id "
                                        "order by benchmark, policy, method", {"id": evaluation_id}).to_pylist()
    largest, table = at_largest_n(rows)
    if not table:
        console.print("no (benchmark, policy) had enough executed, labeled runs per held-out problem")
        return
    benchmarks = ", ".join(sorted({r["benchmark"] for r in rows}))
    _print_rows(AT_N_HEADERS, table,
                caption=f"Best-of-N on held-out problems of {benchmarks}, each method at the largest N it was "
                        f"evaluated at (up to {largest}; single: 1): the accuracy of each way of choosing one of N runs "
                        f"(95% bootstrap interval). Tokens per problem: verification "
                        f"(choosing), generation (sampling the N plans), execution (running the sub-agents).")


def _or_exit(step):
    from orchrm_dagster.glue.main_job import StepFailed

    try:
        return step()
    except StepFailed as err:
        raise click.ClickException(str(err)) from err


def _execution_summary(execution) -> str:
    metadata = execution.metadata
    return (f"{metadata.get('executed')} runs executed ({metadata.get('failed_runs')} failed, "
            f"{metadata.get('runs_per_minute')} runs/min), landed as {metadata.get('landed_batch')}")


def _ingest_callbacks(progress) -> dict:
    """ingest_files / ingest_landed callbacks that show each batch as one step, finished with its counts."""

    def done(outcome) -> None:
        if outcome.ok:
            progress.finish(outcome.summary())
        else:
            progress.fail(outcome.summary())
        progress.advance()

    return {"on_start": lambda name: progress.step(f"ingesting {name}"), "on_done": done}


def _print_outcomes(outcomes) -> None:
    _print_rows(["batch", "runs", "quarantined", "labeled", "correct", "run", "failed files"],
                [[o.batch_id, o.runs, o.quarantined, o.labeled, o.correct, o.status,
                  "; ".join(f"{name}: {cause}" for name, cause in o.failed_files)] for o in outcomes],
                caption="Batches ingested by this command: runs stored, lines quarantined, runs labeled and labeled "
                        "correct; run: the ingest run's result; failed files: those it could not read, and why")


@main.command()
@click.option("--port", default=3000, show_default=True)
def ui(port: int) -> None:
    """Serve the Dagster UI on the same instance the CLI uses."""
    from orchrm_dagster.glue.instance import cli_instance

    cli_instance()  # created here, under its lock: dagster dev's daemon and code server would race on a bare one
    workspace = Path(__file__).resolve().parents[2] / "workspace.yaml"
    target = ["-w", str(workspace)] if workspace.exists() else ["-m", "orchrm_dagster.definitions"]
    # the dagster beside this interpreter: `make ui` runs .venv/bin/orchrm without the venv on PATH
    dagster = Path(sys.executable).with_name("dagster")
    os.execv(str(dagster), [str(dagster), "dev", *target, "-p", str(port)])


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0: every one).")
@click.option("--port", default=8000, show_default=True)
@click.option("--max-batch-plans", type=click.IntRange(min=1), default=64, show_default=True,
              help="Plans scored in one forward batch at most (concurrent requests share a batch).")
@click.option("--max-wait-ms", type=click.FloatRange(min=0), default=5.0, show_default=True,
              help="How long a request waits for others to join its batch.")
@click.option("--poll-seconds", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="How often the champion pointer is checked; a new champion is loaded without a restart.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
def serve(host, port, max_batch_plans, max_wait_ms, poll_seconds, device) -> None:
    """Serve the champion reward model over HTTP: POST /v1/score {question, plans, domain?} -> scores, chosen."""
    from orchrm_dagster.rm import ScoringSettings
    from orchrm_dagster.serving import ServeSettings, serve as run_service
    from orchrm_dagster.storage import StorageSettings, default_storage_url

    # the storage resource's root without building the Definitions: the service process never imports Dagster
    run_service(StorageSettings(root=default_storage_url()).storage_root(), ServeSettings(
        host=host, port=port, max_batch_plans=max_batch_plans, max_wait_ms=max_wait_ms, poll_seconds=poll_seconds,
        scoring=ScoringSettings(device=device)))


def _print_rows(columns, rows, caption: str | None = None, rounded: bool = True) -> None:
    table = Table(caption=caption, caption_justify="left")
    for name in columns:  # headers are never cut: a cell may fold, a column name may not
        table.add_column(str(name), min_width=len(str(name)))
    for row in rows:
        table.add_row(*(_cell(v, rounded) for v in row))
    console.print(table)


def _cell(value, rounded: bool = True) -> str:
    """A table cell; `rounded`: floats to 3 decimals, a whole one without its `.0` (token counts come back as
    6089.0), as the summary tables show them."""
    if value is None:
        return ""
    if rounded and isinstance(value, float):
        return repr(round(value, 3)).removesuffix(".0")
    return str(value)


if __name__ == "__main__":
    main()
