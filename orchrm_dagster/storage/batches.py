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
import time
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from orchrm_dagster.storage.locks import root_lock
from orchrm_dagster.storage.root import (LANDING_SUFFIXES, SOURCE as LEGACY_SOURCE, LandedFile, StorageRoot,
                                         batch_id_for)

INDEX_FOLDER = "_batches"
INDEX_FILE = "index.json"
SOURCES = "_SOURCES"  # in a batch folder of `runs`: what its latest ingest read (files and failures), as JSON
_FORMAT = 1
_FOLLOWED_TABLES = ("runs", "labels")  # tables whose batch generations the index follows


@dataclass(frozen=True)
class BatchEntry:
    """One run batch as the index holds it. Equal by value (each parse of the index makes new entries: a batch
    whose entry is equal to the one it had keeps its view, see `_view`)."""

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
    def with_runs(self) -> int:
        """Batches with runs in the tables."""
        return sum(1 for e in self.entries.values() if e.runs is not None)

    @cached_property
    def paced_cuts(self) -> tuple[float, ...]:
        """When each batch the loop's batching rate let through was cut, oldest first (the rate counts them)."""
        return tuple(sorted(e.cut_at for e in self.entries.values() if e.paced))


@dataclass(frozen=True)
class BatchView:
    """A batch and its files as the landing zone holds them now."""

    entry: BatchEntry
    landed: tuple[LandedFile, ...]  # its files in the landing zone now (a file that left it is not here)

    @property
    def batch_id(self) -> str:
        return self.entry.batch_id

    @property
    def fingerprint(self) -> str:
        return files_fingerprint(self.landed)

    @property
    def current(self) -> bool:
        """Its latest ingest read every file of it as landed now (or none of them is landed any more)."""
        return all(self.entry.files.get(f.name) == f.fingerprint for f in self.landed)

    @property
    def ingested(self) -> bool:
        """Current, and its labels are not older than its runs."""
        return self.current and (self.entry.runs is None or self.entry.labels >= self.entry.runs)

    @property
    def failed_files(self) -> tuple[tuple[str, str], ...]:
        """(name, cause) of its files that its latest ingest could not read."""
        return tuple(sorted(self.entry.failed.items()))

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Its files: those its ingest read, and those landed since (a file that left the landing zone included)."""
        files = self.entry.files
        if all(f.name in files for f in self.landed):
            return tuple(sorted(files))
        return tuple(sorted(set(files).union(f.name for f in self.landed)))

    @property
    def name(self) -> str:
        return batch_name(self.names) or self.batch_id


def ingested_state(files: int, failed_files) -> tuple[str, str]:
    """(state, cause) of an ingested batch of `files` files: "ingested", or which files failed and why."""
    if not failed_files:
        return "ingested", ""
    return (f"ingested, {len(failed_files)} of {max(files, 1)} files failed",
            "; ".join(f"{name}: {cause}" for name, cause in failed_files))


def files_fingerprint(files) -> str:
    """Of the content of a batch's landed files (by name): a file's own fingerprint for a batch of one, so the
    ingest step of a one-file batch keeps the key it had before batches held several files."""
    if len(files) == 1:
        return files[0].fingerprint
    files = sorted(files, key=lambda f: f.name)
    text = "\n".join(f"{f.name}\t{f.fingerprint}" for f in files)
    return f"{len(files)}f-{hashlib.blake2b(text.encode(), digest_size=6).hexdigest()}"


def batch_name(names) -> str:
    """How people see a batch: its file's name, or `first.jsonl +59 files` ('' for none)."""
    names = sorted(names)
    if len(names) <= 1:
        return names[0] if names else ""
    return f"{names[0]} +{len(names) - 1} files"


@dataclass(frozen=True)
class LandingView:
    batches: tuple[BatchView, ...]
    pending: tuple[LandedFile, ...]  # landed files that no batch holds yet
    index: BatchIndex


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
_VIEWS: dict[str, tuple] = {}  # root url -> (index signature, landing listing, view)


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


def landing_view(root: StorageRoot) -> LandingView:
    """Every batch with its files as landed now, and the landed files no batch holds yet. Computed again only when
    the index or the landing zone changed."""
    index = read_index(root)
    landed = root.landed_files()  # the same tuple while the landing zone is unchanged (a local root)
    cached = _VIEWS.get(root.url)
    if cached is not None and cached[0] == index.signature and cached[1] is landed:
        return cached[2]
    earlier = {v.batch_id: v for v in cached[2].batches} if cached is not None else {}
    members: dict[str, list[LandedFile]] = {}
    pending = []
    with no_cycle_collection():
        for file in landed:
            batch = index.batch_of(file.name)
            if batch is None:
                pending.append(file)
            else:
                members.setdefault(batch, []).append(file)
        views = tuple(_view(earlier.get(b), entry, tuple(members.get(b, ())))
                      for b, entry in sorted(index.entries.items()))
    view = LandingView(views, tuple(pending), index)
    _VIEWS[root.url] = (index.signature, landed, view)
    return view


def _view(earlier: BatchView | None, entry: BatchEntry, landed: tuple[LandedFile, ...]) -> BatchView:
    """The batch's view, the earlier one when nothing of it changed (a file landing elsewhere rebuilds one view,
    not every batch's)."""
    if earlier is not None and earlier.entry == entry and earlier.landed == landed:
        return earlier
    return BatchView(entry, landed)


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


@dataclass(frozen=True)
class NewBatch:
    """Landed files the loop cut into a batch, to be recorded before its ingest is requested."""

    batch_id: str
    files: tuple[str, ...]
    paced: bool  # cut by the batching rate, not full


def register_batches(root: StorageRoot, batches: list[NewBatch], now: float | None = None) -> list[str]:
    """Records each batch's files (as not yet read) unless another batch took one of them meanwhile (another
    process cut them first); returns the ids recorded, or found already recorded with the same files."""
    now = time.time() if now is None else now

    def record(entries: dict[str, BatchEntry]) -> list[str]:
        taken = {name for e in entries.values() for name in e.files}
        recorded = []
        for batch in batches:
            existing = entries.get(batch.batch_id)
            if existing is not None:
                if set(existing.files) >= set(batch.files):
                    recorded.append(batch.batch_id)
                continue
            if taken.intersection(batch.files):
                continue
            entries[batch.batch_id] = BatchEntry(batch.batch_id, dict.fromkeys(batch.files, ""), {}, now,
                                                 batch.paced)
            taken.update(batch.files)
            recorded.append(batch.batch_id)
        return recorded

    if not batches:
        return []
    return update_index(root, record)


def batch_holding(root: StorageRoot, name: str) -> str:
    """The batch that holds a landed file: the one the loop cut it into (or named after it), else a new batch of
    its own, recorded now. What `orchrm ingest` and the MAS runner land is such a batch at once, alone."""
    found = read_index(root).batch_of(name)
    if found is None:
        recorded = register_batches(root, [NewBatch(batch_id_for(name), (name,), False)])
        # none recorded: another process cut the file into a batch of its own meanwhile
        found = recorded[0] if recorded else read_index(root).batch_of(name)
    return found


def land(root: StorageRoot, local_file: str | os.PathLike, name: str | None = None) -> LandedFile:
    """Copy a local file into the landing zone (atomically for a local root), as `name` if given, as a run batch
    of its own (recorded before the file appears, so the loop never cuts it into a batch with others: what
    `orchrm ingest` and the runner land is ingested at once, alone). Landing the same source again replaces its
    batch (a re-run changes no count); another source whose name is taken lands under that name plus a hash of
    its path, so it never replaces someone else's runs. Files put into the landing zone otherwise (a fleet's
    writers) are cut into batches by the loop."""
    name = name or Path(local_file).name
    if not name.endswith(LANDING_SUFFIXES):
        raise ValueError(f"{local_file}: a run batch must be a {' or '.join(LANDING_SUFFIXES)} file")
    with root_lock(root, "landing"):
        name = root.landing_name(name, str(Path(local_file).expanduser().resolve()))
    batch_holding(root, name)  # a file landed again stays in the batch that holds it
    return root.put_landed(local_file, name)


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


# ---------------------------------------------------------------- a batch's files, for its ingest


@dataclass(frozen=True)
class BatchFile:
    """A file of a batch as its ingest is to read it."""

    name: str
    path: str
    fingerprint: str | None  # None: not in the landing zone
    size: int = 0  # bytes, as landed (0: not in the landing zone, or not known)


def batch_members(root: StorageRoot, batch_id: str) -> list[BatchFile]:
    """The files of a batch, in the order their runs are kept (by name), fingerprinted now, before they are read:
    a file replaced while its batch is ingested leaves the batch behind it, and it is ingested again. A batch whose
    index entry names no file (none: not recorded yet; or one ingested before the index whose file had left the
    landing zone) is the one-file batch of the landed file named after it: only then is the landing zone listed."""
    entry = read_index(root).entries.get(batch_id)
    if entry is not None and entry.files:
        landed = {name: root.landed_file(name) for name in entry.files}
    else:
        landed = {f.name: f for f in root.landed_files() if batch_id_for(f.name) == batch_id}
    if not landed:
        raise FileNotFoundError(
            f"run batch {batch_id!r}: no batch of that name and no file in {root.uri('landing')} with that name; "
            f"land it there first (orchrm ingest FILE, or copy it in)")
    return [BatchFile(name, root.landing_path(name), file.fingerprint if file else None, file.size if file else 0)
            for name, file in sorted(landed.items())]
