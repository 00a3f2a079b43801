"""One storage root, a local folder or an s3:// prefix, reached through fsspec with the same code path."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat as stat_mode
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.storage.unreachable import StoreUnreachable, reaching_store

# run batches, and trace files (orchrm_dagster.traces.FORMAT_SUFFIXES: converted to runs as they are ingested); a
# trace suffix comes before `.jsonl`, which ends some of them, so that a name's suffix is found whole
LANDING_SUFFIXES = (".otlp.json", ".otlp.jsonl", ".langfuse.json", ".langfuse.jsonl", ".langsmith.json",
                    ".langsmith.jsonl", ".jsonl", ".parquet")
CURRENT = "_CURRENT"  # in a batch folder: the name of the generation folder that holds the batch's parts now
SOURCE = "_SOURCE"  # in a batch folder of `runs` ingested before batches held several files: its file's fingerprint
LANDING_SOURCES = ".sources.json"  # in the landing zone: which local file each landed name came from
_BATCH_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_name(text: str) -> str:
    """`text` with every character but letters, digits, '.', '_' and '-' replaced by '_' (a folder-safe name)."""
    return _BATCH_ID_UNSAFE.sub("_", text)


def batch_id_for(file_name: str) -> str:
    """The run-batch partition key of a landed file: its name when that is already safe, else the safe name plus a
    hash of the real one, so two names that sanitize alike (`a b.jsonl`, `a_b.jsonl`) never share a batch."""
    safe = safe_name(file_name)
    if safe == file_name:
        return safe
    return f"{safe}-{hashlib.blake2b(file_name.encode(), digest_size=4).hexdigest()}"


@dataclass(frozen=True)
class LandedFile:
    name: str
    path: str
    size: int
    fingerprint: str  # changes when the file's content is replaced
    landed_at: float = 0.0  # its modification time (seconds since the epoch)

    @property
    def batch_id(self) -> str:
        """The id of the batch this file makes alone (a batch of several files has an id of its own)."""
        return batch_id_for(self.name)


_RESTAT_PER_LISTING = 2048  # known files whose size and time a local listing checks again each time (in turn)
_RELIST_S = 60  # a local landing folder's entries are read again at least this often
_MTIME_GRAIN_NS = 2_000_000_000  # a folder changed this close to its listing may change again with the same mtime


@dataclass
class _Listing:
    """A local landing zone as this process listed it last."""

    folder_mtime_ns: int
    listed_ns: int
    by_entry: dict[tuple[str, int], LandedFile]  # (name, inode) -> the file
    files: tuple[LandedFile, ...]
    next_restat: int = 0

    def still_valid(self, folder_mtime_ns: int) -> bool:
        """The folder has not changed since: same mtime, which was not so close to the listing that a change in the
        same clock grain would keep it (a file system with coarse times), and the listing is recent."""
        now = time.time_ns()
        return (folder_mtime_ns == self.folder_mtime_ns and folder_mtime_ns < self.listed_ns - _MTIME_GRAIN_NS
                and now - self.listed_ns < _RELIST_S * 1_000_000_000)


_LISTINGS: dict[str, _Listing] = {}


@contextlib.contextmanager
def written_whole(path: str, local: bool) -> Iterator[str]:
    """Yields the path to write so that readers see `path` only once it is complete: on a local disk a temporary
    name renamed over it; an object store publishes an object only when its upload completes."""
    if not local:
        yield path
        return
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


class StorageRoot:
    def __init__(self, url: str, s3_endpoint_url: str | None = None):
        storage_options = {"endpoint_url": s3_endpoint_url} if s3_endpoint_url else {}
        if "://" not in url:
            url = str(Path(url).expanduser().resolve())
        self.fs, self.base = fsspec.core.url_to_fs(url, **storage_options)
        self.base = self.base.rstrip("/")
        self.protocol = self.fs.protocol if isinstance(self.fs.protocol, str) else self.fs.protocol[0]
        self.is_local = self.protocol in ("file", "local")
        self.url = self.base if self.is_local else f"{self.protocol}://{self.base}"
        self.s3_endpoint_url = s3_endpoint_url

    def path(self, *parts: str) -> str:
        """Path inside the filesystem (no protocol)."""
        return "/".join([self.base, *parts])

    def to_uri(self, path: str) -> str:
        """A path inside the filesystem as readers outside fsspec take it (protocol included when remote)."""
        return path if self.is_local else f"{self.protocol}://{path}"

    def uri(self, *parts: str) -> str:
        """Address for readers outside fsspec (DuckDB, error messages): protocol included when remote."""
        return self.to_uri(self.path(*parts))

    # --- layout -------------------------------------------------------------------------
    def landing_path(self, name: str = "") -> str:
        return self.path("landing", name) if name else self.path("landing")

    def table_file(self, table: str) -> str:
        """The single file of an unpartitioned table (problems, pairs)."""
        return self.path("tables", table, "data.parquet")

    def batch_dir(self, table: str, batch_id: str) -> str:
        return self.path("tables", table, f"batch_id={batch_id}")

    def batch_files(self, table: str, batch_id: str) -> list[str]:
        """The Parquet parts of one batch of a partitioned table now (a large batch has several): those of the
        generation its `_CURRENT` names. Paths are listed, never globbed, so a root may hold any character."""
        folder = self.batch_dir(table, batch_id)
        generation = self._current_generation(folder)
        if generation:
            folder = f"{folder}/{generation}"
        return sorted(p for p in self._list_names(folder) if p.endswith(".parquet"))

    def batch_ids(self, table: str) -> list[str]:
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self._list_names(self.path("tables", table), dirs=True)]
        return sorted(n.removeprefix("batch_id=") for n in names if n.startswith("batch_id="))

    def _list_names(self, folder: str, dirs: bool = False) -> list[str]:
        try:
            entries = self.fs.ls(folder, detail=True)
        except FileNotFoundError:
            return []
        wanted = "directory" if dirs else "file"
        return [e["name"] for e in entries if e.get("type") == wanted]

    def replace_batch(self, table: str, batch_id: str, local_parts: list[str]) -> str:
        """Make `local_parts` (temporary files: consumed) the whole content of one batch of `table`, atomically on a
        local folder and on S3 alike: the parts go to a new generation folder, then `_CURRENT` is switched to it in
        one atomic write (a rename, a single PUT). Readers see the old parts or the new ones, never a mix; a crash
        before the switch leaves the batch as it was. Generations older than the previous one are removed. Returns
        the new generation (the batch index follows those of `runs` and `labels`: their writers tell it, see
        `storage.batch_index`)."""
        return self.switch_batch(table, batch_id, self.stage_batch(table, batch_id, local_parts))

    def stage_batch(self, table: str, batch_id: str, local_parts: list[str]) -> str:
        """`replace_batch`'s first half: `local_parts` (consumed) put into a new generation folder that no reader
        sees until `switch_batch` names it; returns the generation. A put that fails (a full disk) removes the
        folder: nothing half written is left to take the space."""
        generation = f"g{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        target = f"{self.batch_dir(table, batch_id)}/{generation}"
        try:
            with reaching_store(self, f"writing a new generation of {self.to_uri(self.batch_dir(table, batch_id))}",
                                "the batch as it was"):
                self.fs.makedirs(target, exist_ok=True)
                for index, part in enumerate(local_parts):
                    self.fs.put_file(part, f"{target}/part-{index:04d}.parquet")
                    if os.path.exists(part):
                        os.remove(part)
        except BaseException as error:
            if not isinstance(error, StoreUnreachable):  # a store that is gone cannot remove it either: the batch's
                self.discard_generation(table, batch_id, generation)  # next switch removes it (no reader sees it)
            raise
        return generation

    def discard_generation(self, table: str, batch_id: str, generation: str) -> None:
        """A staged generation that will never be switched to, removed."""
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(f"{self.batch_dir(table, batch_id)}/{generation}", recursive=True)

    def switch_batch(self, table: str, batch_id: str, generation: str) -> str:
        """`replace_batch`'s second half: the batch's `_CURRENT` switched to a staged `generation`."""
        folder = self.batch_dir(table, batch_id)
        with reaching_store(self, f"switching {self.to_uri(folder)} to its new generation",
                            "the batch as it was, or whole in its new generation"):
            previous = self._current_generation(folder)
            self.write_atomically(f"{folder}/{CURRENT}", generation.encode())
            for stale in self._list_names(folder, dirs=True):
                if stale.rstrip("/").rsplit("/", 1)[-1] not in (generation, previous):
                    self.fs.rm(stale, recursive=True)
            for legacy in self._list_names(folder):  # parts of the layout before generations
                if legacy.endswith(".parquet"):
                    self.fs.rm(legacy)
        return generation

    def batch_generation(self, table: str, batch_id: str) -> str:
        """The batch's current generation ('' for none, or a batch written before generations): generation names
        begin with their creation time, so a later write sorts after an earlier one."""
        return self._current_generation(self.batch_dir(table, batch_id)) or ""

    def batch_written_at(self, table: str, batch_id: str) -> float | None:
        """When the batch's current generation was written (seconds since the epoch; None: no generation)."""
        generation = self.batch_generation(table, batch_id)
        return int(generation[1:21]) / 1e9 if generation.startswith("g") else None

    def _current_generation(self, folder: str) -> str | None:
        try:
            return self.fs.cat_file(f"{folder}/{CURRENT}").decode().strip()
        except FileNotFoundError:
            return None

    def write_atomically(self, path: str, data: bytes) -> None:
        """Readers see `path` with the old content or with `data`, never a part of it."""
        if not self.is_local:  # an object store publishes a PUT whole
            self.fs.pipe_file(path, data)
            return
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):  # the write failed (a full disk): no stray file left
                os.remove(tmp)

    # --- landing ------------------------------------------------------------------------
    def landed_files(self) -> tuple[LandedFile, ...]:
        """The batch files in the landing zone, by name. On a local root the listing reads the folder's entries
        (names and inodes) only when the folder changed, and stats only the entries it has not seen: a file landed
        by rename, as `land` and every safe copy do, is a new entry. A file rewritten in place keeps its entry; each
        listing stats a further share of the known files, so such a rewrite is seen within a few listings. While
        nothing changed, the same tuple is returned."""
        if self.is_local:
            return self._local_landed_files()
        landing = self.landing_path()
        self.fs.invalidate_cache(landing)  # another process landed files since this one listed
        if not self.fs.exists(landing):
            return ()
        files = []
        for info in self.fs.ls(landing, detail=True):
            name = info["name"].rstrip("/").split("/")[-1]
            if info.get("type") != "file" or not name.endswith(LANDING_SUFFIXES) or name.startswith("."):
                continue
            files.append(self._landed_from_info(name, info))
        return tuple(sorted(files, key=lambda f: f.name))

    @staticmethod
    def _landed_from_info(name: str, info: dict) -> LandedFile:
        stamp = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
        modified = info.get("mtime") or info.get("LastModified") or 0.0
        landed_at = modified.timestamp() if hasattr(modified, "timestamp") else float(modified)
        return LandedFile(name, info["name"], int(info["size"]), f"{info['size']}:{stamp}", landed_at)

    def _local_landed_files(self) -> tuple[LandedFile, ...]:
        folder = self.landing_path()
        try:
            folder_mtime = os.stat(folder).st_mtime_ns
        except FileNotFoundError:
            return ()
        listing = _LISTINGS.get(folder)
        if listing is None or not listing.still_valid(folder_mtime):
            listing = self._list_local(folder, folder_mtime, listing)
            _LISTINGS[folder] = listing
        self._restat_some(folder, listing)
        return listing.files

    @staticmethod
    def _list_local(folder: str, folder_mtime: int, previous: _Listing | None) -> _Listing:
        """The folder's entries, stat'ing only those not in `previous` (the same tuple of files when none
        changed)."""
        known = previous.by_entry if previous is not None else {}
        by_entry = {}
        with os.scandir(folder) as entries:
            for entry in entries:
                name = entry.name
                if not name.endswith(LANDING_SUFFIXES) or name.startswith("."):
                    continue
                key = (name, entry.inode())
                landed = known.get(key) or _stat_landed(folder, name)
                if landed is not None:
                    by_entry[key] = landed
        if previous is not None and by_entry.keys() == known.keys():
            return _Listing(folder_mtime, time.time_ns(), known, previous.files, previous.next_restat)
        return _Listing(folder_mtime, time.time_ns(), by_entry, tuple(sorted(by_entry.values(), key=lambda f: f.name)))

    @staticmethod
    def _restat_some(folder: str, listing: _Listing) -> None:
        """Stats the next share of the known files; one rewritten in place gets its new fingerprint."""
        keys = list(listing.by_entry)
        if not keys:
            return
        start = listing.next_restat % len(keys)
        changed = False
        for key in (keys[start:] + keys[:start])[:_RESTAT_PER_LISTING]:
            now = _stat_landed(folder, key[0])
            if now is None or now.fingerprint != listing.by_entry[key].fingerprint:
                changed = True
                if now is None:
                    del listing.by_entry[key]
                else:
                    listing.by_entry[key] = now
        listing.next_restat = start + _RESTAT_PER_LISTING
        if changed:
            listing.files = tuple(sorted(listing.by_entry.values(), key=lambda f: f.name))

    def landed_file(self, name: str) -> LandedFile | None:
        """One landed file as it is now (None: not in the landing zone)."""
        if self.is_local:
            return _stat_landed(self.landing_path(), name)
        path = self.landing_path(name)
        self.fs.invalidate_cache(path)
        try:
            return self._landed_from_info(name, self.fs.info(path))
        except FileNotFoundError:
            return None

    def landing_name(self, name: str, source: str) -> str:
        """The name under which the local file `source` (a resolved path) lands as `name`: `name`, made visible (the
        landing zone ignores hidden files), or, when another source landed under it, `name` plus a hash of the
        path, so a file never replaces someone else's. Recorded in the landing zone's `.sources.json`; the caller
        holds the root's `landing` lock (storage.batches.land)."""
        if name.startswith("."):  # the landing zone ignores hidden files (partial uploads): land it visibly
            name = "_" + name.lstrip(".")
        self.fs.makedirs(self.landing_path(), exist_ok=True)
        sources_path = self.landing_path(LANDING_SOURCES)
        try:
            sources = json.loads(self.fs.cat_file(sources_path))
        except FileNotFoundError:
            sources = {}
        if sources.get(name, source) != source:
            suffix = next(x for x in LANDING_SUFFIXES if name.endswith(x))
            name = f"{name[: -len(suffix)]}-{hashlib.blake2b(source.encode(), digest_size=4).hexdigest()}{suffix}"
        if sources.get(name) != source:
            self.write_atomically(sources_path, json.dumps({**sources, name: source}, indent=1).encode())
        return name

    def put_landed(self, local_file: str | os.PathLike, name: str) -> LandedFile:
        """Copy a local file into the landing zone as `name` (a name from `landing_name`), whole: on a local root a
        hidden copy renamed into place, on an object store one upload."""
        target = self.landing_path(name)
        if self.is_local:
            tmp = self.landing_path(f".{name}.{uuid.uuid4().hex}.part")
            self.fs.put_file(str(local_file), tmp)
            self.fs.mv(tmp, target)
        else:
            self.fs.put_file(str(local_file), target)
        return self.landed_file(name)

    # --- parquet ------------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic_writer(self, path: str) -> Iterator[str]:
        """Yields a path to write; readers see the file at `path` only once it is complete."""
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with written_whole(path, local=self.is_local) as target:
            yield target

    def write_table(self, table: pa.Table, path: str) -> None:
        with self.atomic_writer(path) as target, self.fs.open(target, "wb") as out:
            pq.write_table(table, out, compression="zstd")

    def read_table(self, path: str, columns: list[str] | None = None) -> pa.Table:
        with self.fs.open(path, "rb") as src:
            return pq.read_table(src, columns=columns)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)


def _stat_landed(folder: str, name: str) -> LandedFile | None:
    """A local landed file from its stat (fingerprinted as fsspec's listing did: size and float mtime)."""
    path = f"{folder}/{name}"
    try:
        status = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat_mode.S_ISREG(status.st_mode):
        return None
    return LandedFile(name, path, status.st_size, f"{status.st_size}:{status.st_mtime}", status.st_mtime)


def local_work_dir(root: StorageRoot) -> Path:
    """A local folder for work in progress (partial outputs to resume from): under the root when it is local."""
    if root.is_local:
        return Path(root.path("work"))
    return root_cache_dir(root.url, "work")


def cache_dir() -> Path:
    """This machine's cache for object-store roots (local mirrors of checkpoints, work in progress, the warehouse
    file): ORCHRM_CACHE, default ~/.cache/orchrm. Everything in it can be rebuilt from the storage root."""
    return Path(os.environ.get("ORCHRM_CACHE") or "~/.cache/orchrm").expanduser()


def root_cache_dir(root_url: str, kind: str) -> Path:
    """This machine's cache folder of `kind` (work, warehouse, dagster_home) for one storage root."""
    return cache_dir() / kind / hashlib.sha1(root_url.encode()).hexdigest()[:12]
