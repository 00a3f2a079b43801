import json

import duckdb
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.ingest.batch import ingest_batch
from orchrm_dagster.storage import land
from orchrm_dagster.storage.warehouse import Warehouse
from tests.conftest import write_lines


def counts(root):
    warehouse = Warehouse(root)
    warehouse.refresh_views()
    with warehouse.connect() as con:
        return {t: con.execute(f"select count(*) from {t}").fetchone()[0]
                for t in ("runs", "subagent_calls", "quarantine")}


def bad_batch(tmp_path, good_records):
    lines = [orjson.dumps(r) for r in good_records]
    lines.insert(2, b'{"run_id": "cut-off", "plan": ')
    lines.insert(5, orjson.dumps({**good_records[0], "run_id": "bad-kind", "policy": {"name": "x", "kind": "?"}}))
    lines.append(orjson.dumps(good_records[4]))  # the same run again, later in the file
    return write_lines(tmp_path / "batch_a.jsonl", lines)


def test_good_lines_land_and_bad_lines_are_quarantined_with_reasons(tmp_path, storage_root, good_records):
    landed = land(storage_root, bad_batch(tmp_path, good_records))
    report = ingest_batch(storage_root, landed.batch_id, landed.path)
    assert (report.lines_read, report.runs_written, report.quarantined) == (15, 12, 3)
    assert counts(storage_root)["runs"] == 12
    with Warehouse(storage_root).connect() as con:
        rows = con.execute("select line_number, field, reason, kind from quarantine order by line_number").fetchall()
    assert rows[0][0] == 3 and "malformed JSON" in rows[0][2] and rows[0][2].startswith("batch_a.jsonl:3:")
    assert rows[1][:2] == (6, "policy.kind")
    assert rows[2][0] == 15 and "first seen on line 7" in rows[2][2]
    assert [row[3] for row in rows] == ["malformed_json", "invalid_field", "duplicate_in_file"]
    assert report.reasons == {"malformed_json": 1, "invalid_field: policy.kind": 1, "duplicate_in_file": 1}


def test_reingesting_the_same_file_changes_no_count(tmp_path, storage_root, good_records):
    landed = land(storage_root, bad_batch(tmp_path, good_records))
    ingest_batch(storage_root, landed.batch_id, landed.path)
    first = counts(storage_root)
    ingest_batch(storage_root, landed.batch_id, landed.path)
    assert counts(storage_root) == first


def test_overlapping_batch_adds_only_new_runs(tmp_path, storage_root, good_records):
    first = land(storage_root, write_lines(tmp_path / "one.jsonl", good_records[:8]))
    ingest_batch(storage_root, first.batch_id, first.path)
    second = land(storage_root, write_lines(tmp_path / "two.jsonl", good_records[4:]))
    report = ingest_batch(storage_root, second.batch_id, second.path)
    assert report.runs_written == 4 and report.reasons["already_ingested"] == 4
    assert counts(storage_root)["runs"] == 12
    with Warehouse(storage_root).connect() as con:
        assert con.execute("select count(distinct run_id) from runs").fetchone()[0] == 12
    # and ingesting the first batch again does not steal the runs back or double them
    ingest_batch(storage_root, first.batch_id, first.path)
    assert counts(storage_root)["runs"] == 12


def test_subagent_calls_and_flattened_fields(tmp_path, storage_root, good_records):
    landed = land(storage_root, write_lines(tmp_path / "b.jsonl", good_records[:2]))
    ingest_batch(storage_root, landed.batch_id, landed.path)
    counts(storage_root)
    with Warehouse(storage_root).connect() as con:
        run = con.execute("select policy_kind, orchestrator_tokens, subagent_tokens, n_subagent_calls, plan_hash, "
                          "batch_id from runs where run_id = ?", [good_records[0]["run_id"]]).fetchone()
        calls = con.execute("select count(*) from subagent_calls where run_id = ?", [good_records[0]["run_id"]]).fetchone()
    assert run[0] == good_records[0]["policy"]["kind"]
    assert run[1] == good_records[0]["tokens"]["orchestrator"] and run[2] == good_records[0]["tokens"]["subagents"]
    assert run[3] == len(good_records[0]["subagents"]) == calls[0]
    assert len(run[4]) == 32 and run[5] == "b.jsonl"


def test_plan_hash_ignores_whitespace_only():
    from orchrm_dagster.contract import plan_hash

    assert plan_hash("<agent>\n  <agent_id>1</agent_id></agent>") == plan_hash("<agent> <agent_id>1</agent_id></agent>")
    assert plan_hash("<agent_id>1</agent_id>") != plan_hash("<agent_id>2</agent_id>")


def test_parquet_batch_is_ingested_like_jsonl(tmp_path, storage_root, good_records):
    rows = [dict(r, meta=None, subagents=None) for r in good_records[:5]]
    rows[3]["policy"] = {"name": "x", "kind": "nonsense", "step": None}
    path = tmp_path / "batch.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    landed = land(storage_root, path)
    report = ingest_batch(storage_root, landed.batch_id, landed.path)
    assert (report.runs_written, report.quarantined) == (4, 1)
    assert report.reasons == {"invalid_field: policy.kind": 1}


def test_empty_warehouse_tables_are_queryable(storage_root):
    Warehouse(storage_root).refresh_views()
    con = duckdb.connect(storage_root.path("warehouse.duckdb"), read_only=True)
    assert con.execute("select count(*) from runs").fetchone() == (0,)
    assert "policy_kind" in [d[0] for d in con.execute("select * from runs").description]


def test_parallel_staging_numbers_lines_across_workers_and_finds_duplicates_between_them(
        tmp_path, storage_root, good_records, monkeypatch):
    from orchrm_dagster.ingest import batch

    monkeypatch.setattr(batch, "PARALLEL_MIN_BYTES", 1)
    lines = [orjson.dumps(r) for r in good_records] + [b"{oops"] + [orjson.dumps(good_records[0])]
    landed = land(storage_root, write_lines(tmp_path / "par.jsonl", lines))
    report = ingest_batch(storage_root, landed.batch_id, landed.path, workers=2)
    assert report.workers == 2
    assert (report.runs_written, report.quarantined) == (12, 2)
    assert len(storage_root.batch_files("runs", landed.batch_id)) == 1  # rewritten without the duplicate
    counts(storage_root)
    with Warehouse(storage_root).connect() as con:
        assert con.execute("select min(line_number), max(line_number) from runs").fetchone() == (1, 12)
        rows = con.execute("select line_number, reason from quarantine order by 1").fetchall()
    assert rows[0][0] == 13 and "malformed JSON" in rows[0][1]
    assert rows[1][0] == 14 and "first seen on line 1" in rows[1][1]


def test_a_smaller_reingest_leaves_no_stale_parts(tmp_path, storage_root, good_records, monkeypatch):
    from orchrm_dagster.ingest import batch

    monkeypatch.setattr(batch, "PARALLEL_MIN_BYTES", 1)
    path = write_lines(tmp_path / "shrink.jsonl", good_records)
    landed = land(storage_root, path)
    report = ingest_batch(storage_root, landed.batch_id, landed.path, workers=2)
    assert report.workers == 2 and report.runs_written == len(good_records)
    landed = land(storage_root, write_lines(tmp_path / "shrink.jsonl", good_records[:3]))
    ingest_batch(storage_root, landed.batch_id, landed.path, workers=1)
    assert len(storage_root.batch_files("runs", landed.batch_id)) == 1
    assert counts(storage_root)["runs"] == 3


def test_a_table_file_written_before_a_column_existed_shows_that_column_as_null(storage_root):
    old_rows = pa.table({"round": [1], "policy_checkpoint": ["grpo-r0001"], "reward_mode": ["orchrm"]})
    storage_root.write_table(old_rows, storage_root.table_file("grpo_rounds"))
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views(("grpo_rounds",))
    rows = warehouse.query("select round, reward_mode, method, training_tokens from grpo_rounds").to_pylist()
    assert rows == [{"round": 1, "reward_mode": "orchrm", "method": None, "training_tokens": None}]


def test_chunks_claimed_in_any_order_by_two_processes_keep_their_line_numbers(tmp_path, storage_root, good_records):
    from orchrm_dagster.ingest import batch
    from orchrm_dagster.ingest.settings import IngestSettings

    lines = [orjson.dumps(r) for r in good_records]
    lines[4:4] = [b"", b"{oops"]  # a blank line and a bad one: lines 5 and 6
    path = write_lines(tmp_path / "chunks.jsonl", lines)
    chunks = batch._chunks(storage_root, path, workers=2)
    assert len(chunks) > 4 and chunks[0].first_line == 1
    sources = (batch.BatchFile("chunks.jsonl", path, None),)
    tasks = [batch.StageTask(storage_root, sources, "b", chunks, str(tmp_path / f"part{i}"), IngestSettings())
             for i in range(2)]
    order = list(range(len(chunks)))[::-1]  # the later chunks first, shared out alternately
    parts = [batch.stage_part(tasks[i], iter(order[i::2] + [len(chunks)])) for i in range(2)]
    runs = pa.concat_tables([pq.read_table(p.runs) for p in parts])
    quarantine = pa.concat_tables([pq.read_table(p.quarantine) for p in parts])
    assert sorted(runs["line_number"].to_pylist()) == [n for n in range(1, 15) if n not in (5, 6)]
    by_line = dict(zip(runs["line_number"].to_pylist(), runs["run_id"].to_pylist()))
    assert [by_line[n] for n in sorted(by_line)] == [r["run_id"] for r in good_records]
    assert quarantine["line_number"].to_pylist() == [6]
    assert sum(p.lines_read for p in parts) == 13  # every line but the blank one, each read once


def test_a_failure_while_staging_stops_the_workers_before_it_is_raised(tmp_path, storage_root, monkeypatch):
    import multiprocessing
    import tempfile
    from pathlib import Path

    import pytest

    from orchrm_dagster.ingest import batch
    from orchrm_dagster.synthetic import generate_runs

    path = write_lines(tmp_path / "many.jsonl", [orjson.dumps(r) for r in generate_runs(3000, seed=5)])
    monkeypatch.setattr(batch, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(batch, "CHUNK_BYTES", 1 << 16)  # many chunks, so the worker has some left to claim
    real, seen = batch.validate_line, []

    def fail_on_the_2000th(line, settings):  # in this process only: spawned workers import the real one
        seen.append(line)
        if len(seen) == 2000:
            raise RuntimeError("a bug in staging")
        return real(line, settings)

    monkeypatch.setattr(batch, "validate_line", fail_on_the_2000th)
    with pytest.raises(RuntimeError, match="a bug in staging"):
        batch.ingest_batch(storage_root, "b", path, workers=2)
    assert multiprocessing.active_children() == []  # none left staging into a folder that is gone
    assert not list(Path(tempfile.gettempdir()).glob("orchrm-ingest-b-*")) and storage_root.batch_ids("runs") == []


def test_a_record_with_two_unstorable_values_is_quarantined_under_the_first_in_reading_order(
        tmp_path, storage_root, good_records):
    big = 2**63 - 1
    record = {**good_records[0], "tokens": {"orchestrator_prompt": big, "orchestrator_completion": 1},
              "meta": {"a": 2**70}, "subagents": [{"agent_id": "1", "x": 2**70}]}
    path = write_lines(tmp_path / "two.jsonl", [orjson.dumps(good_records[1]), json.dumps(record).encode()])
    report = ingest_batch(storage_root, "two", path)
    assert (report.runs_written, report.quarantined) == (1, 1)
    assert report.reasons == {"unstorable_value": 1}
    (field,) = [r["field"] for p in storage_root.batch_files("quarantine", "two") for r in pq.read_table(p).to_pylist()]
    assert field == "tokens.orchestrator_prompt"  # before meta.a and subagents[0].x
