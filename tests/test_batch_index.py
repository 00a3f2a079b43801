"""The batch index beside the tables: what the loop reads instead of a pointer file per batch and per landed file, a
root from before it read as it was, and a tick whose reads do not grow with what was ever landed."""

import hashlib
import json
import os
import time

import pytest

from orchrm_dagster.loop import read_state
from orchrm_dagster.storage import (NewBatch, StorageRoot, land, landing_view, publish_batch, read_index, record_ingest,
                                    register_batches)
from orchrm_dagster.storage import batch_index
from orchrm_dagster.storage import root as storage_root_module
from tests.conftest import drop


def land_empty(root: StorageRoot, tmp_path, names):
    for name in names:
        path = tmp_path / name
        path.write_text("")
        drop(root, path)


def publish(root: StorageRoot, tmp_path, table: str, batch: str) -> str:
    part = tmp_path / f"{table}-{batch}.parquet"
    part.write_bytes(b"")  # a tick never reads a part
    generation = publish_batch(root, table, batch, [str(part)])
    assert generation == root.batch_generation(table, batch)
    return generation


def test_a_root_from_before_the_index_reads_as_it_was(tmp_path, storage_root):
    """One-file batches with `_SOURCE`, and no index: the index is rebuilt from them, every batch ingested as
    before, and the ingested inputs fingerprinted exactly as before (the pairs built on them stay current)."""
    land_empty(storage_root, tmp_path, ["a.jsonl", "b c.jsonl"])
    landed = {f.name: f for f in storage_root.landed_files()}
    for file in landed.values():
        publish(storage_root, tmp_path, "runs", file.batch_id)
        publish(storage_root, tmp_path, "labels", file.batch_id)
        storage_root.write_atomically(f"{storage_root.batch_dir('runs', file.batch_id)}/_SOURCE",
                                      file.fingerprint.encode())
    os.remove(batch_index.index_path(storage_root))
    lines = [f"{b}:{storage_root.batch_generation('runs', b)}:{storage_root.batch_generation('labels', b)}"
             for b in storage_root.batch_ids("runs")]
    before = hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]  # what the ingested inputs were
    view = landing_view(storage_root)
    assert [(b.batch_id, b.name, b.ingested) for b in view.batches] == [
        (landed["a.jsonl"].batch_id, "a.jsonl", True), (landed["b c.jsonl"].batch_id, "b c.jsonl", True)]
    assert view.pending == () and read_index(storage_root).inputs == before
    assert os.path.exists(batch_index.index_path(storage_root))
    (tmp_path / "a.jsonl").write_text("{}\n")
    landed_again = land(storage_root, tmp_path / "a.jsonl")  # a new copy: its batch is behind it
    [a, _] = landing_view(storage_root).batches
    assert a.batch_id == "a.jsonl" and a.landed == (landed_again,) and not a.ingested


def test_the_index_follows_every_generation_of_runs_and_labels(tmp_path, storage_root):
    runs = publish(storage_root, tmp_path, "runs", "x")
    entry = read_index(storage_root).entries["x"]
    assert (entry.runs, entry.labels) == (runs, "")
    labels = publish(storage_root, tmp_path, "labels", "x")
    publish(storage_root, tmp_path, "quarantine", "x")  # not followed
    entry = read_index(storage_root).entries["x"]
    assert (entry.runs, entry.labels) == (runs, labels) and labels > runs


def test_files_another_batch_holds_are_not_cut_twice(tmp_path, storage_root):
    land_empty(storage_root, tmp_path, ["a.jsonl", "b.jsonl", "c.jsonl"])
    assert register_batches(storage_root, [NewBatch("one", ("a.jsonl", "b.jsonl"), True)]) == ["one"]
    # another process cut b.jsonl and c.jsonl meanwhile: refused; the same batch again: already there
    assert register_batches(storage_root, [NewBatch("two", ("b.jsonl", "c.jsonl"), True),
                                           NewBatch("one", ("a.jsonl", "b.jsonl"), True)]) == ["one"]
    view = landing_view(storage_root)
    assert [(b.batch_id, [f.name for f in b.landed], b.current) for b in view.batches] == [
        ("one", ["a.jsonl", "b.jsonl"], False)]
    assert [f.name for f in view.pending] == ["c.jsonl"]


def _root_with(tmp_path, files: int, per_batch: int) -> StorageRoot:
    root = StorageRoot(str(tmp_path / f"root-{files}"))
    names = [f"worker-{i:05d}.jsonl" for i in range(files)]
    land_empty(root, tmp_path, names)
    landed = {f.name: f for f in root.landed_files()}
    batches = [names[i:i + per_batch] for i in range(0, files, per_batch)]
    register_batches(root, [NewBatch(f"batch-{i:04d}", tuple(b), True) for i, b in enumerate(batches)], now=0.0)
    for i, batch in enumerate(batches):
        record_ingest(root, f"batch-{i:04d}", {n: landed[n].fingerprint for n in batch}, {}, runs=None)
    a_minute_ago = time.time() - 60  # nothing is landing now (a folder changed just now is listed again)
    os.utime(root.landing_path(), (a_minute_ago, a_minute_ago))
    return root


@pytest.mark.parametrize("per_batch", [1, 20])
def test_a_tick_with_nothing_new_reads_as_much_whatever_was_landed(tmp_path, monkeypatch, per_batch):
    """What a tick reads (stats, listings, file reads) once the index and the landing zone were read: the same for
    40 landed files as for 400, in batches of one file (a root from before batches held several) or of twenty."""
    monkeypatch.setattr(storage_root_module, "_RESTAT_PER_LISTING", 8)
    calls: dict[str, int] = {}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return function(*args, **kwargs)
        return wrapper

    reads = {}
    for files in (40, 400):
        root = _root_with(tmp_path, files, per_batch)
        first = read_state(root)
        assert len(first.batches) == files // per_batch and first.pending == ()
        assert all(b.ingested for b in first.batches)
        with monkeypatch.context() as patch:
            calls.clear()
            patch.setattr(os, "stat", counted("stat", os.stat))
            patch.setattr(os, "scandir", counted("scandir", os.scandir))
            for method in ("cat_file", "exists", "ls", "info", "open", "_open"):
                if hasattr(type(root.fs), method):
                    patch.setattr(type(root.fs), method, counted(method, getattr(type(root.fs), method)))
            state = read_state(root)
        assert state.batches == first.batches and state.inputs == first.inputs
        reads[files] = dict(calls)
    assert reads[40] == reads[400] and reads[40].get("stat", 0) >= 8, reads
    assert reads[40].get("scandir", 0) == 0  # the landing folder did not change: its entries are not read again


def test_a_batch_that_did_not_change_keeps_its_view_and_its_batch_when_the_index_is_written(tmp_path):
    """Each write of the index is parsed into new entries: a batch whose entry is equal keeps its view (and the loop
    its Batch); only the batch the write changed is made again."""
    root = _root_with(tmp_path, 30, 10)
    before = read_state(root).batches
    views = landing_view(root).batches
    record_ingest(root, "batch-0001", {}, {}, runs=None)
    after = read_state(root).batches
    assert [a is b for a, b in zip(landing_view(root).batches, views)] == [True, False, True]
    assert [a is b for a, b in zip(after, before)] == [True, False, True]


def test_a_new_file_is_seen_by_the_next_tick(tmp_path):
    root = _root_with(tmp_path, 30, 10)
    assert read_state(root).pending == ()
    land_empty(root, tmp_path, ["late.jsonl"])
    assert [f.name for f in read_state(root).pending] == ["late.jsonl"]


def test_a_file_rewritten_in_place_is_seen_within_a_few_ticks(tmp_path, monkeypatch):
    """Landing by rename is a new folder entry; a file rewritten in place keeps it, and the listing stats a share of
    the known files each time until it finds it."""
    monkeypatch.setattr(storage_root_module, "_RESTAT_PER_LISTING", 8)
    root = _root_with(tmp_path, 30, 10)
    assert all(b.ingested for b in read_state(root).batches)
    path = root.landing_path("worker-00017.jsonl")
    with open(path, "w") as out:
        out.write('{"more": "content"}\n')
    stale = [next(b for b in read_state(root).batches if b.batch_id == "batch-0001").ingested for _ in range(4)]
    assert stale[-1] is False  # 30 files, 8 a listing: found by the fourth


def test_the_index_is_json_beside_the_tables(tmp_path, storage_root):
    land_empty(storage_root, tmp_path, ["a.jsonl"])
    register_batches(storage_root, [NewBatch("a.jsonl", ("a.jsonl",), True)], now=12.5)
    with open(batch_index.index_path(storage_root)) as index:
        data = json.load(index)
    assert batch_index.index_path(storage_root).endswith("/tables/_batches/index.json")
    assert data["batches"]["a.jsonl"] == {"files": {"a.jsonl": ""}, "failed": {}, "cut_at": 12.5, "paced": True,
                                          "runs": None, "labels": ""}
