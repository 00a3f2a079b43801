"""The publishing side of an ingest: the parts its workers staged (and, when some files could not be read, the
rows the batch already held of them) made into the batch's runs, calls and quarantine, with every run_id already
landed (within a file, across the batch's files, or in another batch) dropped and quarantined. DuckDB does it
working on ids only; the caller holds the root's `runs` lock, so two ingests never de-duplicate at once.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

import sql
from orchrm_dagster.contract import QuarantineKind
from orchrm_dagster.ingest.report import IngestReport, StagedPart
from orchrm_dagster.ingest.settings import IngestSettings
from orchrm_dagster.storage import StorageRoot, StoreUnreachable, writing


def deduplicate_and_publish(root: StorageRoot, batch_id: str, parts: list[StagedPart], staging: str,
                            settings: IngestSettings, report: IngestReport, failed: list[str]) -> str:
    """Publishes the batch's runs, calls and quarantine; returns the generation of its runs."""
    keyed = len(report.files) > 1
    # order is not needed, and keeping it costs memory on multi-GB batches
    config = {"memory_limit": "2GB", "temp_directory": staging, "threads": 2, "preserve_insertion_order": False}
    with duckdb.connect(config=config) as con:
        if not root.is_local:
            con.register_filesystem(root.fs)
        if failed and root.batch_files("runs", batch_id):
            parts = [*parts, _carry(con, root, batch_id, failed, staging)]
            report.files = [dataclasses.replace(f, failed=f"{f.failed}; the batch keeps the runs it had of it")
                            if f.failed else f for f in report.files]
        outputs = {"runs": [p.runs for p in parts], "calls": [p.calls for p in parts],
                   "quarantine": [str(Path(staging, "final-quarantine.parquet"))]}
        common = {"staged_runs": sql.list_literal(outputs["runs"])}
        con.execute(sql.load("ingest_classify_lines", existing_runs=_existing_runs_relation(root, batch_id), **common))
        (dropped,) = con.execute("SELECT count(*) FROM line_fate WHERE NOT keep").fetchone()
        # rewrite runs and calls without the duplicates (and, for several files, as one part each, the calls without
        # their staged source_file); otherwise the staged parts are final
        if dropped or keyed:
            final = {name: str(Path(staging, f"final-{name}.parquet")) for name in ("runs", "calls")}
            con.execute(sql.load("ingest_write_runs", out=sql.literal(final["runs"]), **common))
            con.execute(sql.load("ingest_write_calls", staged_calls=sql.list_literal(outputs["calls"]),
                                 out=sql.literal(final["calls"]), call_key=_call_key(keyed),
                                 drop_key="EXCLUDE (source_file)" if keyed else ""))
            outputs["runs"], outputs["calls"] = [final["runs"]], [final["calls"]]
        con.execute(sql.load("ingest_write_quarantine", staged_quarantine=sql.list_literal([p.quarantine for p in parts]),
                             out=sql.literal(outputs["quarantine"][0]), max_raw_chars=str(settings.max_raw_chars),
                             duplicate_in_file=sql.literal(QuarantineKind.DUPLICATE_IN_FILE.value),
                             already_ingested=sql.literal(QuarantineKind.ALREADY_INGESTED.value), **common))
        kinds = con.execute("SELECT kind, field FROM read_parquet(?)", [outputs["quarantine"][0]]).fetchall()
        report.reasons = Counter(kind if kind != QuarantineKind.INVALID_FIELD.value else f"{kind}: {field}"
                                 for kind, field in kinds)
        _count_by_file(con, report, outputs)
    rows = {key: [pq.ParquetFile(path).metadata.num_rows for path in outputs[key]] for key in outputs}
    report.runs_written, report.subagent_calls_written, report.quarantined = (
        sum(rows[key]) for key in ("runs", "calls", "quarantine"))
    for key in ("runs", "calls"):  # a process that claimed no chunk (or only bad lines) leaves an empty part
        outputs[key] = [path for path, count in zip(outputs[key], rows[key]) if count] or outputs[key][:1]
    return _replace_batch_tables(root, batch_id, outputs)


_TABLE_OUTPUTS = (("subagent_calls", "calls"), ("quarantine", "quarantine"), ("runs", "runs"))


def _replace_batch_tables(root: StorageRoot, batch_id: str, outputs: dict[str, list[str]]) -> str:
    """Every table's parts staged before any table is switched to them: a write that fails (a full disk) leaves each
    table of the batch as it was, and removes what it staged. Runs switch last: a batch's runs appear only once its
    calls and quarantine are in place. Returns the runs' generation."""
    staged: dict[str, str] = {}
    try:
        for table, key in _TABLE_OUTPUTS:
            with writing(f"run batch {batch_id} ({table})", root.batch_dir(table, batch_id)):
                staged[table] = root.stage_batch(table, batch_id, outputs[key])
    except BaseException as error:
        if not isinstance(error, StoreUnreachable):  # a store that is gone cannot remove them either; unread, they
            for table, generation in staged.items():  # go at the batch's next switch
                root.discard_generation(table, batch_id, generation)
        raise
    for table, generation in staged.items():
        with writing(f"run batch {batch_id} ({table}: its current generation)", root.batch_dir(table, batch_id)):
            root.switch_batch(table, batch_id, generation)
    return staged["runs"]


def _existing_runs_relation(root: StorageRoot, batch_id: str) -> str:
    files = [root.to_uri(path) for b in root.batch_ids("runs") if b != batch_id for path in root.batch_files("runs", b)]
    if not files:
        return "(SELECT NULL::VARCHAR AS run_id, NULL::VARCHAR AS batch_id WHERE false)"
    return f"(SELECT run_id, batch_id FROM read_parquet({sql.list_literal(files)}))"


def _call_key(keyed: bool) -> str:
    return "source_file, line_number" if keyed else "line_number"


def _carry(con, root: StorageRoot, batch_id: str, names: list[str], staging: str) -> StagedPart:
    """The batch's current rows of `names` (files its new ingest could not read) as a staged part of it."""
    out = StagedPart(0, *(str(Path(staging, f"carried-{key}.parquet")) for key in ("runs", "calls", "quarantine")))
    parts = {table: sql.list_literal([root.to_uri(path) for path in root.batch_files(table, batch_id)])
             for table in ("runs", "subagent_calls", "quarantine")}
    con.execute(sql.load("ingest_carry_files", runs=parts["runs"], calls=parts["subagent_calls"],
                         quarantine=parts["quarantine"], files="(" + ", ".join(map(sql.literal, names)) + ")",
                         out_runs=sql.literal(out.runs), out_calls=sql.literal(out.calls),
                         out_quarantine=sql.literal(out.quarantine)))
    return out


def _count_by_file(con, report: IngestReport, outputs: dict[str, list[str]]) -> None:
    """Each file's runs and quarantined lines, as published."""
    if len(report.files) == 1:
        return  # the batch's totals (set by the caller)
    counts = {}
    for key in ("runs", "quarantine"):
        rows = con.execute("SELECT source_file, count(*) FROM read_parquet(?) GROUP BY ALL", [outputs[key]]).fetchall()
        counts[key] = dict(rows)
    for file in report.files:
        file.runs, file.quarantined = counts["runs"].get(file.name, 0), counts["quarantine"].get(file.name, 0)
