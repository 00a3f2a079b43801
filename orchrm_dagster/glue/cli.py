"""`orchrm`: what people do without the UI. It runs the same Definitions in-process, on the same
Dagster instance as `dagster dev`, so every run it makes shows up in the UI's history."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console(width=None if sys.stdout.isatty() else 220)  # piped or captured: wide tables, not folded cells
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_]+(/[A-Za-z0-9_]+)*$")


def _definitions():
    from orchrm_dagster.definitions import build_definitions

    return build_definitions()  # built now, so --storage / ORCHRM_STORAGE given to this command apply


def _storage():
    return _definitions().resources["storage"]


@click.group()
@click.option("--storage", "storage_url", envvar="ORCHRM_STORAGE", default=None,
              help="Storage root: a folder or s3://bucket/prefix (default: ./storage, or $ORCHRM_STORAGE).")
def main(storage_url: str | None) -> None:
    """orchrm: multi-agent run logs -> labels -> pairs -> orchestration reward model."""
    if storage_url:
        os.environ["ORCHRM_STORAGE"] = storage_url


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
def ingest(files: tuple[Path, ...]) -> None:
    """Land FILES (.jsonl / .parquet) and ingest and label each as a run batch."""
    from orchrm_dagster.glue.commands import ingest_files

    with _progress() as progress:
        task = progress.add_task("ingesting", total=len(files))
        outcomes = ingest_files(_definitions(), list(files), on_done=lambda name: progress.advance(task))
    _print_outcomes(outcomes)
    if any(o.status != "SUCCESS" for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("batches", nargs=-1, required=True)
def reingest(batches: tuple[str, ...]) -> None:
    """Ingest and label BATCHES (batch ids or names of files already in the landing zone) again: what a failed
    batch needs once its cause is fixed. The loop's own ingest step, so the loop sees it done."""
    from orchrm_dagster.glue.commands import ingest_landed
    from orchrm_dagster.storage import batch_id_for

    defs = _definitions()
    root = defs.resources["storage"].storage_root()
    landed = {f.batch_id: f.name for f in root.landed_files()}
    unknown = [b for b in batches if b not in landed and batch_id_for(b) not in landed]
    if unknown:
        raise click.BadParameter(f"not in {root.uri('landing')}: {', '.join(unknown)}", param_hint="BATCHES")
    names = [landed.get(b) or landed[batch_id_for(b)] for b in batches]
    with _progress() as progress:
        task = progress.add_task("ingesting", total=len(names))
        outcomes = ingest_landed(defs, names, on_done=lambda name: progress.advance(task))
    _print_outcomes(outcomes)
    if any(o.status != "SUCCESS" for o in outcomes):
        sys.exit(1)


@main.command()
@click.argument("selection", nargs=-1, required=True)
@click.option("--partition", "partition_key", default=None,
              help="Partition key: a run batch, or benchmark|policy for the orchestration assets (e.g. gsm8k|smollm2-base).")
@click.option("--config", "config_file", default=None, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Run config as YAML or JSON, as the UI's launchpad takes it (ops: {asset: {config: {...}}}).")
def materialize(selection: tuple[str, ...], partition_key: str | None, config_file: Path | None) -> None:
    """Materialize asset keys (e.g. `problems labels`) or a Dagster selection string (e.g. `group:labels`)."""
    from orchrm_dagster.glue.commands import materialize_selection, register_orchestration_partitions

    text = " or ".join(f'key:"{s}"' if _PLAIN_KEY.match(s) else f"({s})" for s in selection)
    defs = _definitions()
    if partition_key and "|" in partition_key:
        register_orchestration_partitions(defs)
    with console.status(f"materializing {text}"):
        result = materialize_selection(defs, text, partition_key, _run_config(config_file))
    console.print(f"run {result.run_id}: {'SUCCESS' if result.success else 'FAILURE'}")
    if not result.success:
        from orchrm_dagster.glue.commands import failure_messages

        for message in failure_messages(result):
            console.print(f"[red]{message}[/red]")
        sys.exit(1)


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

        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    else:
        _print_rows(columns, rows)


@main.command()
def status() -> None:
    """Batches, runs, quarantined lines and labels, per batch and in total; and each landed file's ingest state (a
    failed one with the cause of its latest run, until it is re-ingested)."""
    import sql
    from orchrm_dagster.glue.instance import cli_instance
    from orchrm_dagster.glue.loop import loop_state
    from orchrm_dagster.loop import batch_states

    storage = _storage()
    warehouse = storage.warehouse()
    states = {s.batch_id: s for s in batch_states(loop_state(cli_instance(), storage.storage_root()))}
    if not warehouse.exists() and not states:
        raise click.ClickException(f"nothing landed or ingested yet under {storage.storage_root().url}")
    rows = warehouse.query(sql.load("batch_status")).to_pylist() if warehouse.exists() else []
    counts = ["runs", "quarantined", "labeled", "correct"]
    by_batch = {batch: dict.fromkeys(counts, 0) for batch in states} | {r["batch_id"]: r for r in rows}
    table = []
    for batch in sorted(by_batch):  # a batch whose file left the landing zone was ingested, or it would not be here
        state = states.get(batch)
        table.append([batch, *(by_batch[batch][c] for c in counts), state.state if state else "ingested",
                      state.cause if state else ""])
    totals = ["total"] + [sum(row[c] for row in by_batch.values()) for c in counts] + ["", ""]
    _print_rows(["batch_id", *counts, "state", "cause"], table + [totals])
    failed = [s for s in states.values() if s.failed]
    if failed:
        console.print(f"[red]{len(failed)} landed batch(es) failed to ingest; re-ingest with "
                      f"`orchrm reingest BATCH` once the cause is fixed, or land them again[/red]")


@main.command(name="orchestrate")
@click.option("--benchmark", default="gsm8k", show_default=True, help="A benchmark of the problems table.")
@click.option("--policy", "policy_names", multiple=True, help="Policy name(s); default: every registered policy.")
@click.option("--problems", "problem_limit", default=4, show_default=True, help="The first N problems.")
@click.option("--samples", "n_samples", default=2, show_default=True, help="Plans per problem.")
@click.option("--seed", default=0, show_default=True)
@click.option("--best-of", "best_of", type=click.IntRange(min=1), default=None,
              help="Best-of-N before rollout: sample N plans per problem (at least), let the champion reward model "
                   "score them, and execute only the best of each problem.")
@click.option("--ingest/--no-ingest", default=True, show_default=True, help="Ingest and label the landed runs.")
def orchestrate_command(benchmark, policy_names, problem_limit, n_samples, seed, best_of, ingest) -> None:
    """Sample orchestration plans, execute them with sub-agents, land (and ingest) the runs."""
    from orchrm_dagster.glue.commands import ingest_landed
    from orchrm_dagster.glue.main_job import orchestrate_policies

    from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings

    defs = _definitions()
    if best_of:
        n_samples = max(n_samples, best_of)
    sampling = PlanSamplingSettings(n_samples=n_samples, problem_limit=problem_limit, seed=seed)
    execution = ExecutionSettings(selection="orchrm_bon", best_of_n=best_of) if best_of else ExecutionSettings()
    with _step_status() as show:
        executions = _or_exit(lambda: orchestrate_policies(
            defs, benchmark, list(policy_names), sampling, execution,
            on_start=lambda name: show(f"{benchmark} x {name}: sampling {n_samples} plans for {problem_limit} "
                                       f"problems and executing them"),
            on_done=_print_execution))
    if ingest:
        _print_outcomes(ingest_landed(defs, [e.metadata["landed_batch"] for e in executions]))


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
@click.option("--benchmark", default="gsm8k", show_default=True)
@click.option("--problems", "problem_limit", default=4, show_default=True)
@click.option("--samples", "n_samples", default=2, show_default=True)
@click.option("--history-runs", default=1200, show_default=True,
              help="Runs in the generated history batch the first reward model learns from.")
@click.option("--max-train-pairs", default=320, show_default=True)
def main_job(benchmark: str, problem_limit: int, n_samples: int, history_runs: int, max_train_pairs: int) -> None:
    """The main job on the embedded default: problems; real MAS runs from the embedded model for every policy;
    the example batch and a generated history batch; labels; pairs; a reward model; held-out runs; scores of every
    run; the Best-of-N evaluation table."""
    from orchrm_dagster.glue.main_job import MainJobOptions, run_main_job

    options = MainJobOptions(benchmark, problem_limit, n_samples, history_runs, max_train_pairs)
    with _step_status() as show:
        outcomes, evaluation_id = _or_exit(
            lambda: run_main_job(_definitions(), options, on_step=show, on_execution=_print_execution))
    _print_outcomes(outcomes)
    click.get_current_context().invoke(status)
    _print_reward_model_summary()
    _print_evaluation(evaluation_id, largest_n_only=True)
    console.print(f"every row: orchrm query \"select * from evaluation where evaluation_id = '{evaluation_id}'\"",
                  soft_wrap=True)


def _print_reward_model_summary() -> None:
    # select *: a table written before champions were per domain lacks the domain columns
    rows = _storage().warehouse().query("select * from rm_checkpoints order by version").to_pylist()
    _print_rows(["rm version", "domains", "champion of", "train pairs", "validation pairs", "val accuracy",
                 "val accuracy by domain"],
                [(r["version"], ", ".join(r.get("domains") or ()),
                  ", ".join(r.get("champion_of") or ()) or ("every domain" if r["is_champion"] else ""),
                  r["n_train_pairs"], r["n_validation_pairs"], _rounded(r["val_accuracy"]),
                  _by_domain(r.get("val_accuracy_by_domain"))) for r in rows])


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


@main.command(name="evaluate", epilog=_methods_epilog())
@click.option("--benchmark", "benchmarks", multiple=True, help="Only this benchmark (repeatable).")
@click.option("--policy", "policies", multiple=True, help="Only this policy (repeatable).")
@click.option("--methods", type=_MethodList(), default=None,
              help="Comma-separated methods (default: all): " + ", ".join(_evaluation_methods()) + ".")
@click.option("--n", "ns", default="1,2,4,8", show_default=True, help="Comma-separated candidate-set sizes N.")
@click.option("--judge-draws", type=click.IntRange(min=1), default=None,
              help="Candidate sets each LLM judge sees per problem and N (each one call, cached).")
def evaluate_command(benchmarks, policies, methods, ns, judge_draws) -> None:
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
    if judge_draws:
        chosen["judge"] = JudgeSettings(draws=judge_draws)
    try:
        settings = EvaluationSettings(**chosen)
    except (pydantic.ValidationError, ValueError) as err:
        raise click.BadParameter(str(err)) from err
    run_config = dg.RunConfig(ops={"evaluation": from_engine(EvaluationConfig, settings)})
    with console.status("evaluating"):
        result = _or_exit(lambda: materialize_or_fail(_definitions(), 'key:"evaluation"', run_config))
    metadata = materialization_metadata(result, "evaluation")
    _print_evaluation(metadata["evaluation_id"])
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


def _method_choice() -> click.Choice:
    from orchrm_dagster.grpo.methods import method_names

    return click.Choice(method_names())


@main.command(name="loop")
@click.option("--rounds", type=click.IntRange(min=1), default=2, show_default=True,
              help="GRPO rounds to run now: the loop goes on until it has run this many more.")
@click.option("--method", type=_method_choice(), default=None, help=_method_help())
@click.option("--rewards", callback=_reward_names, default=None, metavar="NAME[,NAME...]", help=_rewards_help())
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
def loop_command(rounds, method, rewards, reward_weights, start, steps, group_size, token_budget,
                 retrain_min_new_pairs) -> None:
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
                                                   ("start", start), ("steps", steps), ("group_size", group_size))
                     if value is not None}
    if rewards is not None and reward_weights is None:
        round_changes["reward_weights"] = ()  # the configured weights belong to the configured rewards
    changes = {key: value for key, value in (("token_budget", token_budget),
                                             ("retrain_min_new_pairs", retrain_min_new_pairs)) if value is not None}
    try:
        loop = dataclasses.replace(loop, rounds=before + rounds,
                                   round=dataclasses.replace(loop.round, **round_changes), **changes)
    except (pydantic.ValidationError, ValueError) as err:
        raise click.BadParameter(str(err)) from err
    with _progress() as progress:
        task = progress.add_task("loop", total=rounds)

        def on_step(step) -> None:
            progress.console.log(f"{step.kind}: {step.key} ({step.why})"
                                 + (f", attempt {step.attempt + 1}" if step.attempt else ""))
            progress.update(task, description=f"{step.kind} {step.key}")

        def on_decision(decision) -> None:
            progress.update(task, completed=len(finished_rounds(root)) - before)
            for key, cause in decision.failed:
                progress.console.log(f"[red]gave up on {key}: {cause}[/red]")

        try:
            decision = drive(defs, loop, on_step=on_step, on_decision=on_decision)
        except LoopFailed as err:
            raise click.ClickException(str(err)) from err
    console.print(f"the loop stopped: {decision.stopped}")
    _print_grpo_rounds()


def _print_grpo_rounds() -> None:
    rows = _storage().warehouse().query(
        "select round, coalesce(method, 'grpo') AS method, reward_mode AS mode, rm_version AS rm, steps, "
        "round(mean_reward, 3) reward, round(kl, 4) kl, generation_tokens AS gen_tokens, reward_tokens AS rm_tokens, "
        "rollout_tokens, training_tokens AS train_tokens, "
        "round(heldout_reward_before, 3) heldout_before, round(heldout_reward_after, 3) heldout_after, "
        "round(heldout_accuracy, 3) heldout_acc, promoted, round(seconds) AS wall_seconds, reason "
        "from grpo_rounds order by round").to_pylist()
    _print_rows(list(rows[0]) if rows else ["round"], [list(r.values()) for r in rows])


def _int_list(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as err:
        raise click.BadParameter(f"{text!r}: comma-separated integers expected", param_hint=option) from err


def _print_evaluation(evaluation_id: str, largest_n_only: bool = False) -> None:
    rows = _storage().warehouse().query(
        "select benchmark, policy, method, n, round(accuracy, 3) accuracy, round(ci_low, 3) ci_low, "
        "round(ci_high, 3) ci_high, n_problems, round(verification_tokens) verification_tokens, "
        "round(coalesce(generation_tokens, 0)) generation_tokens, round(execution_tokens) execution_tokens, "
        "round(verification_tokens + coalesce(generation_tokens, 0) + execution_tokens) total_tokens "
        "from evaluation where evaluation_id = $id "
        "order by benchmark, policy, n, method", {"id": evaluation_id}).to_pylist()
    if largest_n_only:  # per (benchmark, policy): one sample, and every method at the largest N it reached
        top = {}
        for r in rows:
            top[(r["benchmark"], r["policy"])] = max(top.get((r["benchmark"], r["policy"]), 1), r["n"])
        rows = [r for r in rows if r["method"] == "single" or r["n"] == top[(r["benchmark"], r["policy"])]]
    if not rows:
        console.print("no (benchmark, policy) had enough executed, labeled runs per held-out problem")
        return
    _print_rows(list(rows[0]), [list(r.values()) for r in rows])


def _step_status():
    """A spinner whose text each step replaces; yields the function that sets it."""
    import contextlib

    @contextlib.contextmanager
    def shown():
        with console.status("starting") as spinner:
            yield lambda text: spinner.update(text)

    return shown()


def _or_exit(step):
    from orchrm_dagster.glue.main_job import StepFailed

    try:
        return step()
    except StepFailed as err:
        raise click.ClickException(str(err)) from err


def _print_execution(execution) -> None:
    metadata = execution.metadata
    console.print(f"{execution.benchmark} x {execution.policy}: {metadata.get('executed')} runs executed "
                  f"({metadata.get('failed_runs')} failed, {metadata.get('runs_per_minute')} runs/min) "
                  f"-> landed {metadata.get('landed_batch')}")


def _print_outcomes(outcomes) -> None:
    _print_rows(["batch", "runs", "quarantined", "labeled", "correct", "run"],
                [[o.batch_id, o.runs, o.quarantined, o.labeled, o.correct, o.status] for o in outcomes])


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


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


def _print_rows(columns, rows) -> None:
    table = Table()
    for name in columns:  # headers are never cut: a cell may fold, a column name may not
        table.add_column(str(name), min_width=len(str(name)))
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row))
    console.print(table)


if __name__ == "__main__":
    main()
