"""The batch index: which landed files each run batch holds, what its latest ingest read of each (fingerprint, or
why a file could not be read), and the generations of its runs and labels, in one file beside the tables
(`tables/_batches/index.json`). The loop reads it instead of a pointer file per batch, so a tick costs a listing
of the landing zone and one small read whatever the number of files ever landed; a process keeps the index it
parsed until the file changes.

Every write goes through `update_index` under the storage root's `batch_index` lock. Whoever writes a batch of
`runs` or `labels` tells the index its new generation: an ingest through `record_ingest`, the rest through
`publish_batch`. The tables stay the truth:
each batch's `runs` folder holds `_SOURCES` (what its ingest read) and `_CURRENT` (its generation), and an index
that is missing (a root from before the index, or one deleted to rebuild it) is rebuilt from them. The index is
written after the tables, so a crash between the two leaves it behind them: the batch looks not ingested and is
ingested again, which is idempotent.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property

from orchrm_dagster.storage.locks import root_lock
from orchrm_dagster.storage.root import SOURCE as LEGACY_SOURCE, StorageRoot, batch_id_for

INDEX_FOLDER = "_batches"
INDEX_FILE = "index.json"
SOURCES = "_SOURCES"  # in a batch folder of `runs`: what its latest ingest read (files and failures), as JSON
_FORMAT = 1
_FOLLOWED_TABLES = ("runs", "labels")  # tables whose batch generations the index follows


@dataclass(frozen=True)
class BatchEntry:
    """One run batch as the index holds it. Equal by value (each parse of the index makes new entries: a batch
    whose entry is equal to the one it had keeps its view, see `storage.batches._view`)."""

    batch_id: str
    files: Mapping[str, str] = field(default_factory=dict)  # name -> fingerprint its latest ingest read ("": not yet)
    failed: Mapping[str, str] = field(default_factory=dict)  # name -> why its latest ingest could not read it
    cut_at: float = 0.0  # when the loop cut it from the landing zone (0: cut otherwise)
    paced: bool = False  # cut by the loop's batching rate (not full when cut): these count against the rate
    runs: str | None = None  # generation of its runs (None: no runs written; "": written before generations)
    labels: str = ""  # generation of its labels ("": none)

    def to_json(self) -> dict:
        return {"files": dict(self.files), "failed": dict(self.failed), "cut_at": self.cut_at,
                "paced": self.paced, "runs": self.runs, "labels": self.labels}

    @classmethod
    def from_json(cls, batch_id: str, data: dict) -> BatchEntry:
        return cls(batch_id, data.get("files", {}), data.get("failed", {}), data.get("cut_at", 0.0),
                   data.get("paced", False), data.get("runs"), data.get("labels", ""))


@dataclass(frozen=True)
class BatchIndex:
    entries: Mapping[str, BatchEntry]
    signature: tuple = ()  # of the file it was read from: equal signatures, equal content

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_file", {name: b for b, e in self.entries.items() for name in e.files})

    def batch_of(self, name: str) -> str | None:
        """The batch a landed file belongs to: the one that lists it, else the one named after it (a one-file batch
        ingested before the index, whose file has since left the landing zone and landed again)."""
        found = self._by_file.get(name)
        if found is None and batch_id_for(name) in self.entries:
            return batch_id_for(name)
        return found

    @cached_property
    def inputs(self) -> str:
        """A fingerprint of every batch with runs, as they are now (its runs and labels generations): what pairs and
        scores built from the ingested runs record, so the loop can tell when they are behind."""
        lines = [f"{b}:{e.runs}:{e.labels}" for b, e in sorted(self.entries.items()) if e.runs is not None]
        return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]

    @cached_property
    def generations(self) -> dict[str, str]:
        """Each batch with runs -> the generation of its runs: what `inputs` fingerprints, batch by batch (the loop
        tells from it whether the pairs, or a reward model, read a batch as it is now)."""
        return {b: e.runs for b, e in self.entries.items() if e.runs is not None}

    @cached_property
    def with_runs(self) -> int:
        """Batches with runs in the tables."""
        return sum(1 for e in self.entries.values() if e.runs is not None)

    @cached_property
    def paced_cuts(self) -> tuple[float, ...]:
        """When each batch the loop's batching rate let through was cut, oldest first (the rate counts them)."""
        return tuple(sorted(e.cut_at for e in self.entries.values() if e.paced))


# ---------------------------------------------------------------- reading


@contextmanager
def no_cycle_collection():
    """For code that allocates many short-lived objects forming no reference cycles: the cycle collector's passes
    over them were about a sixth of an ingest's staging CPU time (bench/ingest_label.py --compare) and half of
    building a view of 30,000 batches."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_INDEXES: dict[str, BatchIndex] = {}  # root url -> the index this process read last


def index_path(root: StorageRoot) -> str:
    return root.path("tables", INDEX_FOLDER, INDEX_FILE)


def read_index(root: StorageRoot) -> BatchIndex:
    """The index as the storage root holds it now: parsed again only when the file changed (one stat on a local
    root, one HEAD on S3, when it did not), rebuilt from the tables when there is none."""
    index = _load(root)
    if index is None:
        with root_lock(root, "batch_index"):
            if _load(root) is None:
                _write(root, rebuild_entries(root))
        index = _load(root)
    return index


def _load(root: StorageRoot) -> BatchIndex | None:
    while True:
        signature = _signature(root)
        if signature is None:
            return None
        cached = _INDEXES.get(root.url)
        if cached is not None and cached.signature == signature:
            return cached
        try:
            data = json.loads(root.fs.cat_file(index_path(root)))
        except FileNotFoundError:  # replaced between the stat and the read: read the new one
            continue
        with no_cycle_collection():
            index = BatchIndex({b: BatchEntry.from_json(b, e) for b, e in data["batches"].items()}, signature)
        _INDEXES[root.url] = index
        return index


def _signature(root: StorageRoot) -> tuple | None:
    path = index_path(root)
    if root.is_local:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns, stat.st_size
    root.fs.invalidate_cache(path)
    try:
        info = root.fs.info(path)
    except FileNotFoundError:
        return None
    return info.get("ETag") or info.get("LastModified"), info.get("size")


def rebuild_entries(root: StorageRoot) -> dict[str, BatchEntry]:
    """The index from the tables: each batch's `_SOURCES` (or, for a batch from before them, `_SOURCE`: the
    fingerprint of its one file, whose name the batch is named after) and its generations. Reads three small files
    a batch, once."""
    landed = {batch_id_for(f.name): f.name for f in root.landed_files()}
    entries = {}
    with no_cycle_collection():
        for batch in root.batch_ids("runs"):
            runs = root.batch_dir("runs", batch)
            files, failed = _read_sources(runs, landed.get(batch), lambda path: _text(root, path))
            entries[batch] = BatchEntry(batch, files, failed, runs=root.batch_generation("runs", batch),
                                        labels=root.batch_generation("labels", batch))
    return entries


def _text(root: StorageRoot, path: str) -> str | None:
    try:
        return root.fs.cat_file(path).decode()
    except FileNotFoundError:
        return None


def _read_sources(folder: str, own_file: str | None, read) -> tuple[dict, dict]:
    sources = read(f"{folder}/{SOURCES}")
    if sources is not None:
        data = json.loads(sources)
        return data.get("files", {}), data.get("failed", {})
    legacy = read(f"{folder}/{LEGACY_SOURCE}")
    return ({own_file: legacy} if own_file and legacy else {}), {}


# ---------------------------------------------------------------- writing


def update_index(root: StorageRoot, change: Callable[[dict[str, BatchEntry]], object]) -> object:
    """Applies `change` to the index's entries (a dict it may alter) under the index's lock, and writes the result
    once; returns what `change` returned."""
    with root_lock(root, "batch_index"):
        index = _load(root)
        entries = dict(index.entries) if index is not None else rebuild_entries(root)
        result = change(entries)
        _write(root, entries)
    return result


def _write(root: StorageRoot, entries: Mapping[str, BatchEntry]) -> None:
    data = {"format": _FORMAT, "batches": {b: e.to_json() for b, e in sorted(entries.items())}}
    root.fs.makedirs(root.path("tables", INDEX_FOLDER), exist_ok=True)
    root.write_atomically(index_path(root), json.dumps(data, separators=(",", ":")).encode())
    _INDEXES.pop(root.url, None)


def record_ingest(root: StorageRoot, batch_id: str, files: Mapping[str, str], failed: Mapping[str, str],
                  runs: str | None) -> None:
    """What an ingest of the batch read: `files` (name -> fingerprint read, failed files included) and `failed`
    (name -> cause), and the generation of the runs it wrote (None: it wrote none). Written to the batch's
    `_SOURCES` when its runs were written, then to the index, once."""
    if runs is not None:
        root.write_atomically(f"{root.batch_dir('runs', batch_id)}/{SOURCES}",
                              json.dumps({"files": dict(files), "failed": dict(failed)}).encode())

    def record(entries: dict[str, BatchEntry]) -> None:
        entry = entries.get(batch_id, BatchEntry(batch_id))
        entries[batch_id] = replace(entry, files=dict(files), failed=dict(failed),
                                    runs=entry.runs if runs is None else runs)

    update_index(root, record)


def publish_batch(root: StorageRoot, table: str, batch_id: str, local_parts: list[str]) -> str:
    """StorageRoot.replace_batch, with the new generation told to the index when it follows `table` (runs,
    labels): how labels are written (an ingest tells the index through `record_ingest`). Returns it."""
    generation = root.replace_batch(table, batch_id, local_parts)
    if table in _FOLLOWED_TABLES:

        def record(entries: dict[str, BatchEntry]) -> None:
            entry = entries.get(batch_id, BatchEntry(batch_id))
            entries[batch_id] = replace(entry, **{table: generation})

        update_index(root, record)
    return generation
