"""One storage root, a local folder or an s3:// prefix, reached through fsspec with the same code path."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

LANDING_SUFFIXES = (".jsonl", ".parquet")
_BATCH_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def default_storage_url() -> str:
    return os.environ.get("ORCHRM_STORAGE") or "storage"


def batch_id_for(file_name: str) -> str:
    """The run-batch partition key of a landed file: its name with unsafe characters replaced."""
    return _BATCH_ID_UNSAFE.sub("_", file_name)


@dataclass(frozen=True)
class LandedFile:
    name: str
    path: str
    size: int
    fingerprint: str  # changes when the file's content is replaced

    @property
    def batch_id(self) -> str:
        return batch_id_for(self.name)


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

    def uri(self, *parts: str) -> str:
        """Address for readers outside fsspec (DuckDB, error messages): protocol included when remote."""
        path = self.path(*parts)
        return path if self.is_local else f"{self.protocol}://{path}"

    # --- layout -------------------------------------------------------------------------
    def landing_path(self, name: str = "") -> str:
        return self.path("landing", name) if name else self.path("landing")

    def table_file(self, table: str) -> str:
        """The single file of an unpartitioned table (problems, pairs)."""
        return self.path("tables", table, "data.parquet")

    def batch_dir(self, table: str, batch_id: str) -> str:
        return self.path("tables", table, f"batch_id={batch_id}")

    def batch_files(self, table: str, batch_id: str) -> list[str]:
        """The Parquet parts of one batch of a batch-partitioned table (a large batch has several)."""
        return sorted(self.fs.glob(self.path("tables", table, f"batch_id={batch_id}", "*.parquet")))

    def table_glob(self, table: str, partitioned: bool) -> str:
        if partitioned:
            return self.uri("tables", table, "batch_id=*", "*.parquet")
        return self.uri("tables", table, "data.parquet")

    def batch_ids(self, table: str) -> list[str]:
        found = self.fs.glob(self.path("tables", table, "batch_id=*", "*.parquet"))
        return sorted({p.split("/")[-2].removeprefix("batch_id=") for p in found})

    def replace_batch(self, table: str, batch_id: str, local_parts: list[str]) -> None:
        """Make `local_parts` (temporary files: consumed) the whole content of one batch of `table`.
        Locally the batch folder is swapped in by rename, so readers never see a mix of old and new parts."""
        target = self.batch_dir(table, batch_id)
        if not self.is_local:
            stale = set(self.fs.glob(f"{target}/*.parquet"))
            for index, part in enumerate(local_parts):
                key = f"{target}/part-{index:04d}.parquet"
                self.fs.put_file(part, key)
                stale.discard(key)
            if stale:
                self.fs.rm(sorted(stale))
            return
        parent = self.path("tables", table)
        os.makedirs(parent, exist_ok=True)
        fresh = os.path.join(parent, f".batch_id={batch_id}.{uuid.uuid4().hex}.tmp")
        os.makedirs(fresh)
        for index, part in enumerate(local_parts):
            shutil.move(part, os.path.join(fresh, f"part-{index:04d}.parquet"))
        trash = None
        if os.path.exists(target):
            trash = os.path.join(parent, f".trash-{uuid.uuid4().hex}")
            os.rename(target, trash)
        os.rename(fresh, target)
        if trash:
            shutil.rmtree(trash, ignore_errors=True)

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
        """Copy a local file into the landing zone (atomically for a local root), as `name` if given."""
        name = name or Path(local_file).name
        if not name.endswith(LANDING_SUFFIXES):
            raise ValueError(f"{local_file}: a run batch must be a {' or '.join(LANDING_SUFFIXES)} file")
        self.fs.makedirs(self.landing_path(), exist_ok=True)
        target = self.landing_path(name)
        if self.is_local:
            tmp = self.landing_path(f".{name}.{uuid.uuid4().hex}.part")
            self.fs.put_file(str(local_file), tmp)
            self.fs.mv(tmp, target)
        else:
            self.fs.put_file(str(local_file), target)
        return next(f for f in self.landed_files() if f.name == name)

    # --- parquet ------------------------------------------------------------------------
    @contextlib.contextmanager
    def atomic_writer(self, path: str) -> Iterator[str]:
        """Yields a path to write; readers see the file at `path` only once it is complete."""
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        if not self.is_local:  # an object store publishes an object only when its upload completes
            yield path
            return
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            yield tmp
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

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
    import hashlib

    return Path("~/.cache/orchrm/work").expanduser() / hashlib.sha1(root.url.encode()).hexdigest()[:12]
