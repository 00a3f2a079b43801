"""The landing side of run batches: the landing zone seen through the batch index (each batch with its files as
landed now, and the files no batch holds yet), landed files cut into batches and recorded in the index, a local file
landed as a batch of its own, and the files of a batch as its ingest is to read them. The index itself (what each
batch holds and its ingest read, and how it is read, written and rebuilt) is `storage.batch_index`.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from orchrm_dagster.storage.batch_index import BatchEntry, BatchIndex, no_cycle_collection, read_index, update_index
from orchrm_dagster.storage.locks import root_lock
from orchrm_dagster.storage.root import LANDING_SUFFIXES, LandedFile, StorageRoot, batch_id_for


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


# ---------------------------------------------------------------- the landing zone, seen through the index


_VIEWS: dict[str, tuple] = {}  # root url -> (index signature, landing listing, view)


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


# ---------------------------------------------------------------- cutting landed files into batches


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
