import json

import click

from orchrm_dagster.app.cli.common import ROUNDS_SHOWN, console, print_rows, storage, terminal_rounds

# the batch table's count columns (batch_status.sql) and their headers
_COUNTS = ["runs", "quarantined", "labeled", "labeled_by_reference", "labeled_by_run", "correct", "unlabeled",
           "unparsed_plans", "failed_runs"]
_HEADERS = ["runs", "quarantined", "labeled", "by reference", "by run", "correct", "unlabeled", "unparsed plans",
            "no verdict"]


@click.command(name="status")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: the same, one object for scripts.")
def command(fmt: str) -> None:
    """Batches, their files, runs, quarantined lines and labels, per batch and in total: labels by source (a
    reference answer, or the run's own is_correct where its benchmark is trusted), with the runs left unlabeled for
    want of a reference and the labeled runs whose plan does not parse, each said with what to do; each batch's
    ingest state (a failed one with the cause of its latest run, a file its ingest could not read with why, until it
    is re-ingested); the landed files no batch holds yet; and the files whose lines were quarantined, each with its
    first bad line. Then the loop, as the daemon's sensors see it now: what it would do next, what it waits for, why
    it is blocked, the steps it gave up on (cause and attempts); each domain's champion reward model, or why there
    is none and what would change that; the last rounds; the tokens spent against the budget; and what waited longer
    than the freshness windows the UI marks."""
    import sql
    from orchrm_dagster.app.dagster_home import ensure_dagster_home
    from orchrm_dagster.labels import UNLABELED_FIX, unlabeled_note, unparsed_note
    from orchrm_dagster.app.service import service_lines, service_report  # the daemon and the UI as services

    settings = storage()
    ensure_dagster_home()  # a new root's instance gets orchrm's dagster.yaml before anything runs on it
    warehouse = settings.warehouse()
    states, pending, report, problem = _loop(settings.storage_root())
    if problem and fmt != "json":
        console.print(f"[red]{problem}[/red]", soft_wrap=True, highlight=False)
    if not warehouse.exists() and not states and not pending:
        raise click.ClickException(f"nothing landed or ingested yet under {settings.storage_root().url}: the loop "
                                   f"waits for files in its landing zone (orchrm ingest FILE lands one)")
    rows = warehouse.query(sql.load("batch_status")).to_pylist() if warehouse.exists() else []
    counts = _COUNTS
    by_batch = {batch: dict.fromkeys(counts, 0) for batch in states} | {r["batch_id"]: r for r in rows}
    table = []
    for batch in sorted(by_batch):  # a batch whose files left the landing zone was ingested, or it would not be here
        files, state, cause = states.get(batch, ("", "ingested", ""))
        table.append([batch, files, *(by_batch[batch][c] for c in counts), state, cause])
    if pending:
        table.append(["(no batch yet)", pending, *([0] * len(counts)), "landed", "the loop cuts them into a batch"])
    sums = {c: sum(row[c] for row in by_batch.values()) for c in counts}
    unlabeled = _unlabeled_by_benchmark(warehouse) if sums["unlabeled"] else {}
    if fmt == "json":
        batches = [dict(zip(["batch_id", "files", *counts, "state", "cause"], row)) for row in table]
        labels = {"unlabeled": sums["unlabeled"], "unlabeled_by_benchmark": unlabeled,
                  "unlabeled_fix": UNLABELED_FIX if sums["unlabeled"] else None,
                  "unparsed_plans": sums["unparsed_plans"]}
        click.echo(json.dumps({"root": settings.storage_root().url, "batches": batches, "labels": labels,
                               "loop": report.to_json() if report else None, "instance_problem": problem,
                               "services": service_report()},
                              default=str, indent=2))
        return
    totals = ["total", sum(row[1] or 0 for row in table)] + [sums[c] for c in counts] + ["", ""]
    print_rows(["batch_id", "files", *_HEADERS, "state", "cause"], table + [totals],
               caption=f"Batches under {settings.storage_root().url}: landed files, runs ingested, lines "
                       f"quarantined, runs labeled (by a reference answer, by the run's own is_correct) and labeled "
                       f"correct, runs unlabeled for want of a reference, labeled runs whose plan does not parse; "
                       f"state: the batch's ingest")
    if sums["unlabeled"]:
        console.print(unlabeled_note(sums["unlabeled"], unlabeled), style="yellow", soft_wrap=True, markup=False,
                      highlight=False)
    if sums["unparsed_plans"]:
        console.print(f"{unparsed_note(sums['unparsed_plans'])} (orchrm query \"select batch_id, run_id from labels "
                      f"where not plan_parses\")", style="yellow", soft_wrap=True, markup=False, highlight=False)
    failed = [state for _, state, _ in states.values() if "failed" in state]
    if failed:
        console.print(f"[red]{len(failed)} batch(es) failed to ingest, or have files that could not be read; "
                      f"re-ingest with `orchrm reingest FILE` (or BATCH) once the cause is fixed, or land the file "
                      f"again[/red]", soft_wrap=True)
    if warehouse.exists():
        _print_quarantined_files(warehouse)
        _print_environments(warehouse)
    for line, style in service_lines(service_report()):  # whether the daemon and the UI run, when installed
        console.print(line, style=style, soft_wrap=True, markup=False, highlight=False)
    if report is None:
        console.print("the loop: nothing landed yet, nothing to do: it waits for files in its landing zone",
                      soft_wrap=True)
        return
    _print_loop(report)
    if warehouse.exists():
        _print_round_verdicts(warehouse)


def _print_loop(report) -> None:
    """The loop's decision now, the champions, the last rounds, the budget and what is late."""
    decision = report.decision
    console.print(f"[bold]the loop now[/bold] (as the daemon's sensors decide): {report.summary}", soft_wrap=True)
    for step in decision.steps:
        console.print(f"  next: {step.key}: {step.why}" + (f" (attempt {step.attempt + 1})" if step.attempt else ""),
                      soft_wrap=True, markup=False)
    for waiting in decision.waiting:
        console.print(f"  waits for: {waiting}", soft_wrap=True, markup=False)
    if decision.blocked:
        console.print(f"[red]  blocked: {decision.blocked}[/red]", soft_wrap=True)
    for key, attempts, cause in report.failed:
        console.print(f"[red]  gave up on {key} after {attempts} failed run(s): {cause}[/red]", soft_wrap=True)
    if decision.stopped:
        console.print(f"  stopped: {decision.stopped}", soft_wrap=True, markup=False)
    console.print(report.budget_line(), soft_wrap=True)
    print_rows(["domain", "champion", "val accuracy", "validation pairs", "p (vs chance)",
                "why none, or why it falls short, and what would change that"],
               [[s.domain, f"v{s.champion}" if s.champion is not None else "none", s.accuracy, s.pairs_shown,
                 f"{s.p_value:.2g}" if s.p_value is not None else None, s.problem] for s in report.champions],
               caption="Reward-model champions by domain: the version that scores each domain's plans, its accuracy "
                       "on that domain's validation pairs and a one-sided binomial test against chance")
    if report.live:
        print_rows(["domain", "champion", "measured on", "pairs", "ranked right", "95% interval", "val accuracy",
                    "stale"],
                   [[m.domain, f"v{m.rm_version}", m.source, m.pairs, m.accuracy,
                     "[{:.3f}, {:.3f}]".format(*m.interval()) if m.pairs else None, m.validation_accuracy,
                     {True: "stale", False: "fresh", None: "unmeasured"}[stale]] for m, stale, _ in report.live],
                   caption="The champions' live accuracy: pairs they never trained on (the new batches', the last "
                           "round's held-out plans), ranked by their scores; stale (the loop retrains, and rolls "
                           "out) when the interval's one-sided bound lies below the validation accuracy minus "
                           "staleness_margin")
    if report.rounds:
        print_rows(ROUNDS_SHOWN, terminal_rounds(list(report.rounds)),
                   caption=f"The last {len(report.rounds)} GRPO round(s): held-out reward and accuracy before and "
                           f"after with their intervals, the verdict, the reward-hacking flag, the environment, tokens")
    for late in report.late:
        console.print(f"[yellow]late: {late.line()}[/yellow]", soft_wrap=True)


def _unlabeled_by_benchmark(warehouse) -> dict[str, int]:
    """Runs left unlabeled for want of a reference, in all batches, by benchmark (most first)."""
    import sql

    found: dict[str, int] = {}
    for row in warehouse.query(sql.load("unlabeled_runs")).to_pylist():
        found[row["benchmark"]] = found.get(row["benchmark"], 0) + row["unlabeled"]
    return dict(sorted(found.items(), key=lambda item: (-item[1], str(item[0]))))


def _print_quarantined_files(warehouse) -> None:
    """Each file whose lines were quarantined: how many, and its first bad line (file:line: why)."""
    import sql

    rows = warehouse.query(sql.load("quarantined_files")).to_pylist()
    if rows:
        print_rows(["file", "batch_id", "quarantined", "first bad line"],
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


def _loop(root):
    """(batch id -> (landed files, state, cause) of each batch (`orchrm_dagster.loop.batch_states`), landed files no
    batch holds yet, the loop's report (`orchrm_dagster.loop.loop_report`) as the daemon's loop resource decides,
    and why the loop's sensors request nothing on this instance, if they do not: `settings_problem`).
    With nothing landed the loop has nothing to do (its first step ingests what lands): neither the loop, the
    Dagster instance nor the Definitions are imported, and the report is None."""
    from orchrm_dagster.storage import landing_view

    landing = landing_view(root)
    if not landing.batches and not landing.pending:
        return {}, 0, None, None
    from assets.instance_settings import settings_problem
    from assets.loop_state import loop_state
    from orchrm_dagster.app.instance import cli_instance
    from orchrm_dagster.loop import batch_states, loop_report
    from orchrm_dagster.settings import load_settings

    instance = cli_instance()
    state = loop_state(instance, root)
    files = {v.batch_id: len(v.names) for v in landing.batches}
    states = {s.batch_id: (files.get(s.batch_id, 0), s.state, s.cause) for s in batch_states(state)}
    # the loop's settings as the Definitions' `loop` resource has them (the settings file's), without building the
    # Definitions: they import every asset's engine
    return (states, len(landing.pending), loop_report(root, state, load_settings().loop), settings_problem(instance))
