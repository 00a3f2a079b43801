import click

from orchrm_dagster.app.cli.common import console, print_rows, storage


@click.command(name="status")
def command() -> None:
    """Batches, their files, runs, quarantined lines and labels, per batch and in total; each batch's ingest state (a
    failed one with the cause of its latest run, a file its ingest could not read with why, until it is
    re-ingested); the landed files no batch holds yet; and the files whose lines were quarantined, each with its
    first bad line."""
    import sql

    settings = storage()
    warehouse = settings.warehouse()
    states, pending = _batch_states(settings.storage_root())
    if not warehouse.exists() and not states and not pending:
        raise click.ClickException(f"nothing landed or ingested yet under {settings.storage_root().url}")
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
    print_rows(["batch_id", "files", *counts, "state", "cause"], table + [totals],
                caption=f"Batches under {settings.storage_root().url}: landed files, runs ingested, lines "
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


def _batch_states(root) -> tuple[dict[str, tuple[int, str, str]], int]:
    """(batch id -> (landed files, state, cause) of each batch (`orchrm_dagster.loop.batch_states`), landed files no
    batch holds yet). Only a batch not ingested needs the loop and the Dagster instance (a run in flight, or why its
    runs failed); when every batch is ingested, neither is imported."""
    from orchrm_dagster.storage import ingested_state, landing_view

    landing = landing_view(root)
    if all(view.ingested for view in landing.batches):
        return {v.batch_id: (len(v.names), *ingested_state(len(v.names), v.failed_files))
                for v in landing.batches}, len(landing.pending)
    from assets.loop import loop_state
    from orchrm_dagster.app.instance import cli_instance
    from orchrm_dagster.loop import batch_states

    files = {v.batch_id: len(v.names) for v in landing.batches}
    return ({s.batch_id: (files.get(s.batch_id, 0), s.state, s.cause)
             for s in batch_states(loop_state(cli_instance(), root))}, len(landing.pending))
