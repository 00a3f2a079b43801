"""One storage root, a local folder or an s3:// prefix, reached through fsspec with the same code path."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

LANDING_SUFFIXES = (".jsonl", ".parquet")
CURRENT = "_CURRENT"  # in a batch folder: the name of the generation folder that holds the batch's parts now
SOURCE = "_SOURCE"  # in a batch folder of `runs`: the fingerprint of the landed file its ingest read
LANDING_SOURCES = ".sources.json"  # in the landing zone: which local file each landed name came from
_BATCH_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_storage_url() -> str:
    return os.environ.get("ORCHRM_STORAGE") or "storage"


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

    @property
    def batch_id(self) -> str:
        return batch_id_for(self.name)


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

    def replace_batch(self, table: str, batch_id: str, local_parts: list[str]) -> None:
        """Make `local_parts` (temporary files: consumed) the whole content of one batch of `table`, atomically on a
        local folder and on S3 alike: the parts go to a new generation folder, then `_CURRENT` is switched to it in
        one atomic write (a rename, a single PUT). Readers see the old parts or the new ones, never a mix; a crash
        before the switch leaves the batch as it was. Generations older than the previous one are removed."""
        folder = self.batch_dir(table, batch_id)
        generation = f"g{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        self.fs.makedirs(f"{folder}/{generation}", exist_ok=True)
        for index, part in enumerate(local_parts):
            self.fs.put_file(part, f"{folder}/{generation}/part-{index:04d}.parquet")
            if os.path.exists(part):
                os.remove(part)
        previous = self._current_generation(folder)
        self._write_atomically(f"{folder}/{CURRENT}", generation.encode())
        for stale in self._list_names(folder, dirs=True):
            if stale.rstrip("/").rsplit("/", 1)[-1] not in (generation, previous):
                self.fs.rm(stale, recursive=True)
        for legacy in self._list_names(folder):  # parts of the layout before generations
            if legacy.endswith(".parquet"):
                self.fs.rm(legacy)

    def batch_generation(self, table: str, batch_id: str) -> str:
        """The batch's current generation ('' for none, or a batch written before generations): generation names
        begin with their creation time, so a later write sorts after an earlier one."""
        return self._current_generation(self.batch_dir(table, batch_id)) or ""

    def mark_batch_source(self, table: str, batch_id: str, fingerprint: str) -> None:
        """Records which landed file (by fingerprint) the batch's current content came from."""
        self._write_atomically(f"{self.batch_dir(table, batch_id)}/{SOURCE}", fingerprint.encode())

    def batch_source(self, table: str, batch_id: str) -> str | None:
        pointer = f"{self.batch_dir(table, batch_id)}/{SOURCE}"
        return self.fs.cat_file(pointer).decode() if self.fs.exists(pointer) else None

    def is_ingested(self, landed: LandedFile) -> bool:
        """The landed content is the batch's (its ingest recorded this fingerprint) and its labels are not older."""
        batch = landed.batch_id
        return (self.batch_source("runs", batch) == landed.fingerprint
                and self.batch_generation("labels", batch) >= self.batch_generation("runs", batch))

    def ingested_inputs(self) -> str:
        """A fingerprint of every ingested batch as it is now (its runs and labels generations): what pairs and
        scores built from the ingested runs record, so the loop can tell when they are behind."""
        lines = [f"{b}:{self.batch_generation('runs', b)}:{self.batch_generation('labels', b)}"
                 for b in self.batch_ids("runs")]
        return hashlib.sha1("\n".join(lines).encode()).hexdigest()[:16]

    def _current_generation(self, folder: str) -> str | None:
        pointer = f"{folder}/{CURRENT}"
        return self.fs.cat_file(pointer).decode().strip() if self.fs.exists(pointer) else None

    def _write_atomically(self, path: str, data: bytes) -> None:
        if not self.is_local:  # an object store publishes a PUT whole
            self.fs.pipe_file(path, data)
            return
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    # --- landing ------------------------------------------------------------------------
    def landed_files(self) -> list[LandedFile]:
        landing = self.landing_path()
        if not self.fs.exists(landing):
            return []
        files = []
        for info in self.fs.ls(landing, detail=True):
            name = info["name"].rstrip("/").split("/")[-1]
            if info.get("type") != "file" or not name.endswith(LANDING_SUFFIXES) or name.startswith("."):
                continue
            stamp = info.get("ETag") or info.get("mtime") or info.get("LastModified") or ""
            files.append(LandedFile(name, info["name"], int(info["size"]), f"{info['size']}:{stamp}"))
        return sorted(files, key=lambda f: f.name)

    def find_landed(self, batch_id: str) -> LandedFile:
        for landed in self.landed_files():
            if landed.batch_id == batch_id:
                return landed
        raise FileNotFoundError(
            f"run batch {batch_id!r}: no file in {self.uri('landing')} with that name; "
            f"land it there first (orchrm ingest FILE, or copy it in)"
        )

    def land(self, local_file: str | os.PathLike, name: str | None = None) -> LandedFile:
        """Copy a local file into the landing zone (atomically for a local root), as `name` if given. Landing the
        same source again replaces its batch (a re-run changes no count); another source whose name is taken
        lands under that name plus a hash of its path, so it never replaces someone else's runs."""
        name = name or Path(local_file).name
        if not name.endswith(LANDING_SUFFIXES):
            raise ValueError(f"{local_file}: a run batch must be a {' or '.join(LANDING_SUFFIXES)} file")
        self.fs.makedirs(self.landing_path(), exist_ok=True)
        from orchrm_dagster.storage.locks import root_lock

        with root_lock(self, "landing"):
            name = self._landing_name(name, str(Path(local_file).expanduser().resolve()))
        target = self.landing_path(name)
        if self.is_local:
            tmp = self.landing_path(f".{name}.{uuid.uuid4().hex}.part")
            self.fs.put_file(str(local_file), tmp)
            self.fs.mv(tmp, target)
        else:
            self.fs.put_file(str(local_file), target)
        return next(f for f in self.landed_files() if f.name == name)

    def _landing_name(self, name: str, source: str) -> str:
        if name.startswith("."):  # the landing zone ignores hidden files (partial uploads): land it visibly
            name = "_" + name.lstrip(".")
        sources_path = self.landing_path(LANDING_SOURCES)
        sources = json.loads(self.fs.cat_file(sources_path)) if self.fs.exists(sources_path) else {}
        if sources.get(name, source) != source:
            suffix = next(x for x in LANDING_SUFFIXES if name.endswith(x))
            name = f"{name[: -len(suffix)]}-{hashlib.blake2b(source.encode(), digest_size=4).hexdigest()}{suffix}"
        if sources.get(name) != source:
            self._write_atomically(sources_path, json.dumps({**sources, name: source}, indent=1).encode())
        return name

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
