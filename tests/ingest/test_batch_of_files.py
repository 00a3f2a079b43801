"""A run batch of several landed files: one ingest, every file read and reported on its own, a file that cannot be
read failing alone, and nothing a batch held ever lost to a file that fails later."""

import os

import orjson
import pyarrow.parquet as pq

from orchrm_dagster.ingest import ingest_files
from orchrm_dagster.storage import BatchFile, Warehouse, landing_view, read_index, register_batches, NewBatch
from tests.conftest import drop, write_lines


def land(root, tmp_path, name, lines):
    drop(root, write_lines(tmp_path / name, lines))
    return root.landed_file(name)


def members(root, names):
    return [BatchFile(n, root.landing_path(n), (root.landed_file(n) or None) and root.landed_file(n).fingerprint)
            for n in names]


def table(root, name, columns):
    warehouse = Warehouse(root)
    warehouse.refresh_views((name,))
    return warehouse.query(f"select {columns} from {name} order by all").to_pylist()


def test_several_files_are_one_batch_with_each_run_from_its_file_and_line(tmp_path, storage_root, good_records):
    first, second = good_records[:6], good_records[6:]
    land(storage_root, tmp_path, "b.jsonl", [*second, b"{not json"])
    land(storage_root, tmp_path, "a.jsonl", [*first, first[2]])  # line 7 repeats line 3
    land(storage_root, tmp_path, "c.jsonl", [second[0], first[0]])  # both already in a.jsonl or b.jsonl
    register_batches(storage_root, [NewBatch("day-1", ("a.jsonl", "b.jsonl", "c.jsonl"), True)])
    report = ingest_files(storage_root, "day-1", members(storage_root, ["c.jsonl", "a.jsonl", "b.jsonl"]))
    assert (report.runs_written, report.quarantined, report.failed_files) == (12, 4, {})
    assert [(f.name, f.lines_read, f.runs, f.quarantined) for f in report.files] == [
        ("a.jsonl", 7, 6, 1), ("b.jsonl", 7, 6, 1), ("c.jsonl", 2, 0, 2)]
    runs = table(storage_root, "runs", "source_file, line_number, run_id")
    assert [(r["source_file"], r["line_number"]) for r in runs] == [
        *(("a.jsonl", n) for n in range(1, 7)), *(("b.jsonl", n) for n in range(1, 7))]
    assert sorted(r["run_id"] for r in runs) == sorted(r["run_id"] for r in good_records)
    quarantine = table(storage_root, "quarantine", "source_file, line_number, kind, reason")
    assert [(q["source_file"], q["line_number"], q["kind"]) for q in quarantine] == [
        ("a.jsonl", 7, "duplicate_in_file"), ("b.jsonl", 7, "malformed_json"),
        ("c.jsonl", 1, "already_ingested"), ("c.jsonl", 2, "already_ingested")]
    assert quarantine[2]["reason"].startswith("c.jsonl:1: run_id ") and "from b.jsonl:1 in this batch" in quarantine[2]["reason"]
    assert all(q["reason"].startswith(f"{q['source_file']}:{q['line_number']}: ") for q in quarantine)
    calls = table(storage_root, "subagent_calls", "run_id, call_index")
    assert len(calls) == sum(len(r.get("subagents") or []) for r in good_records)
    assert set(pq.read_schema(storage_root.batch_files("subagent_calls", "day-1")[0]).names) >= {"line_number"}
    assert "source_file" not in pq.read_schema(storage_root.batch_files("subagent_calls", "day-1")[0]).names
    [view] = landing_view(storage_root).batches
    assert view.current and view.failed_files == ()


def test_a_file_that_cannot_be_read_fails_alone_and_is_taken_again_once_it_can(tmp_path, storage_root, good_records):
    land(storage_root, tmp_path, "a.jsonl", good_records[:6])
    land(storage_root, tmp_path, "b.jsonl", good_records[6:])
    register_batches(storage_root, [NewBatch("day-1", ("a.jsonl", "b.jsonl"), True)])
    files = members(storage_root, ["a.jsonl", "b.jsonl"])
    os.remove(storage_root.landing_path("b.jsonl"))  # gone between the cut and the ingest
    report = ingest_files(storage_root, "day-1", files)
    assert report.runs_written == 6 and list(report.failed_files) == ["b.jsonl"]
    assert report.failed_files["b.jsonl"].startswith("FileNotFoundError")
    assert read_index(storage_root).entries["day-1"].failed == report.failed_files
    [view] = landing_view(storage_root).batches
    assert view.current and view.failed_files == (("b.jsonl", report.failed_files["b.jsonl"]),)

    land(storage_root, tmp_path, "b.jsonl", good_records[6:])  # back: the batch is behind its files, and is ingested again
    [view] = landing_view(storage_root).batches
    assert not view.current
    report = ingest_files(storage_root, "day-1", members(storage_root, ["a.jsonl", "b.jsonl"]))
    assert report.runs_written == 12 and report.failed_files == {}
    [view] = landing_view(storage_root).batches
    assert view.current and view.failed_files == ()


def test_a_file_the_batch_holds_runs_of_keeps_them_when_it_fails_later(tmp_path, storage_root, good_records):
    land(storage_root, tmp_path, "a.jsonl", good_records[:6])
    land(storage_root, tmp_path, "b.jsonl", [*good_records[6:], b"{bad"])
    register_batches(storage_root, [NewBatch("day-1", ("a.jsonl", "b.jsonl"), True)])
    ingest_files(storage_root, "day-1", members(storage_root, ["a.jsonl", "b.jsonl"]))
    before = table(storage_root, "runs", "source_file, line_number, run_id")
    calls_before = table(storage_root, "subagent_calls", "run_id, call_index, line_number")
    land(storage_root, tmp_path, "a.jsonl", good_records[:5])  # a.jsonl replaced; b.jsonl then cannot be read
    files = members(storage_root, ["a.jsonl", "b.jsonl"])
    os.remove(storage_root.landing_path("b.jsonl"))
    report = ingest_files(storage_root, "day-1", files)
    assert "the batch keeps the runs it had of it" in report.failed_files["b.jsonl"]
    after = table(storage_root, "runs", "source_file, line_number, run_id")
    assert after == [r for r in before if (r["source_file"], r["line_number"]) != ("a.jsonl", 6)]
    assert table(storage_root, "quarantine", "source_file, line_number") == [{"source_file": "b.jsonl", "line_number": 7}]
    kept = {r["run_id"] for r in after}
    assert table(storage_root, "subagent_calls", "run_id, call_index, line_number") == [
        c for c in calls_before if c["run_id"] in kept]


def test_a_batch_none_of_whose_files_can_be_read_stays_as_it_was(tmp_path, storage_root, good_records):
    land(storage_root, tmp_path, "a.jsonl", good_records)
    first = ingest_files(storage_root, "a.jsonl", members(storage_root, ["a.jsonl"]))
    generation = storage_root.batch_generation("runs", "a.jsonl")
    files = members(storage_root, ["a.jsonl"])
    os.remove(storage_root.landing_path("a.jsonl"))
    again = ingest_files(storage_root, "a.jsonl", files)
    assert first.runs_written == 12 and again.runs_written == 0
    assert again.failed_files["a.jsonl"].endswith("the batch keeps the runs it had")
    assert storage_root.batch_generation("runs", "a.jsonl") == generation
    assert len(table(storage_root, "runs", "run_id")) == 12


def test_a_one_file_batch_keeps_the_tables_layout_and_key_it_had(tmp_path, storage_root, good_records):
    landed = land(storage_root, tmp_path, "only.jsonl", [orjson.dumps(r) for r in good_records])
    report = ingest_files(storage_root, landed.batch_id, members(storage_root, ["only.jsonl"]))
    assert report.files[0].runs == 12 and report.source_file == "only.jsonl"
    [view] = landing_view(storage_root).batches
    assert view.batch_id == "only.jsonl" and view.fingerprint == landed.fingerprint and view.ingested is False
    # labels make it ingested (its runs are newer than no labels)
    from orchrm_dagster.labels import label_batch

    label_batch(storage_root, "only.jsonl", {})
    [view] = landing_view(storage_root).batches
    assert view.ingested
