"""One checkpoint store for every kind of trained model under the storage root: reward-model versions
(`checkpoints/rm/v0001/`) and policy checkpoints (`checkpoints/policy/r0001/`), one numbered folder each.

A folder is finished once its `manifest.json` is there: it is written last and atomically (a reader never sees half
of one; a folder without one is a training that was interrupted). On a local root the folders are the root's own; on
an object store they live in a local mirror under the work folder, uploaded once finished and fetched when used: the
small files (manifests, pointers) by `sync`, the weights by `fetch`, the first time. The store's lock is the root's
(`root_lock`), which holds across hosts on an object store. What goes into a manifest, and what a number names (a
version, a round), is the caller's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from orchrm_dagster.faults import fault_point
from orchrm_dagster.storage.locks import root_lock
from orchrm_dagster.storage.root import StorageRoot, local_work_dir
from orchrm_dagster.storage.unreachable import StoreUnreachable, reaching_store
from orchrm_dagster.trainer_checkpoints import MODEL_SUBDIR  # noqa: F401  (the store's model folder: the trainer's)

MANIFEST = "manifest.json"
WHOLE = ".whole"  # in a folder of an object store's local mirror: every file of the root's folder is here


def folder_name(prefix: str, number: int) -> str:
    return f"{prefix}{number:04d}"


def folder_number(path: str, prefix: str) -> int | None:
    """The NNNN of a `prefix`NNNN folder (its path or name), None for any other entry."""
    found = re.fullmatch(rf"{re.escape(prefix)}(\d+)", path.rstrip("/").rsplit("/", 1)[-1])
    return int(found.group(1)) if found else None


def folder_numbers(base: str | Path, prefix: str) -> list[int]:
    """The numbers of the `prefix`NNNN folders in a local `base`, ascending (finished or not): names only, no stat
    of each (the loop asks every tick)."""
    if not os.path.isdir(base):
        return []
    return sorted(n for n in (folder_number(name, prefix) for name in os.listdir(base)) if n is not None)


def write_manifest(folder: str | Path, manifest: dict) -> str:
    """Write the folder's manifest atomically (a reader never sees half a file); returns its path."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, MANIFEST)
    partial = path + ".partial"
    with open(partial, "w") as out:
        json.dump(manifest, out, indent=2, sort_keys=True)
    os.replace(partial, path)
    return path


def read_manifest(folder: str | Path) -> dict:
    with open(os.path.join(folder, MANIFEST)) as source:
        return json.load(source)


def finished_manifests(base: str | Path, prefix: str, key: str = "number") -> list[dict]:
    """Every finished folder of a local `base`, oldest first: its manifest's fields plus its number (as `key`) and
    `path`."""
    found = []
    for number in folder_numbers(base, prefix):
        path = os.path.join(base, folder_name(prefix, number))
        if os.path.exists(os.path.join(path, MANIFEST)):
            found.append({**read_manifest(path), key: number, "path": path})
    return found


def _download(fs, remote: str, local: Path) -> None:
    """`remote` fetched to `local` whole: into a name of its own renamed over it, so another process reading the mirror
    (a second `orchrm` command, the daemon) never reads half a file."""
    local.parent.mkdir(parents=True, exist_ok=True)
    partial = local.with_name(f"{local.name}.{uuid.uuid4().hex}.partial")
    try:
        fs.get_file(remote, str(partial))
        os.replace(partial, local)
    finally:
        partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class CheckpointStore:
    """The numbered folders of one kind of checkpoint under `root`: `checkpoints/<kind>/<prefix>NNNN/`."""

    root: StorageRoot
    kind: str  # the folder under checkpoints/: "rm", "policy"
    prefix: str  # of a folder's name: "v" (a version), "r" (a round)
    lock_name: str  # of the root lock that keeps two writers of this kind apart, on any host

    @property
    def base(self) -> Path:
        """The local folder of the folders: the root's own on a local root, else a mirror under the work folder."""
        if self.root.is_local:
            return Path(self.root.path("checkpoints", self.kind))
        return local_work_dir(self.root) / "checkpoints" / self.kind

    def local_dir(self) -> Path:
        """`base`, created."""
        self.base.mkdir(parents=True, exist_ok=True)
        return self.base

    def name(self, number: int) -> str:
        return folder_name(self.prefix, number)

    def folder(self, number: int) -> Path:
        """A folder's local path (it may not exist: see `fetch`)."""
        return self.base / self.name(number)

    def remote(self, *parts: str) -> str:
        """A path of the store on the root (fsspec form: the local path on a local root)."""
        return self.root.path("checkpoints", self.kind, *parts)

    def uri(self, *parts: str) -> str:
        return self.root.uri("checkpoints", self.kind, *parts)

    def numbers(self) -> list[int]:
        """Every local folder's number, ascending, finished or not."""
        return folder_numbers(self.base, self.prefix)

    def next_number(self) -> int:
        return max(self.numbers(), default=0) + 1

    def manifests(self, key: str = "number") -> list[dict]:
        """`finished_manifests` of the local folders (on an object store: as far as `sync` fetched them)."""
        return finished_manifests(self.base, self.prefix, key)

    def is_finished(self, number: int) -> bool:
        return (self.folder(number) / MANIFEST).exists()

    def sync(self, pointers: Collection[str] = (), small: Collection[str] = (MANIFEST,)) -> Path:
        """The local folder, up to date with the root: on an object store, the `pointers` (files beside the folders,
        fetched again each time: they change) and each folder's `small` files that the mirror lacks (they never change
        once written), so a fresh machine numbers on from the last folder and overwrites nothing. Weights come when
        used (`fetch`)."""
        base = self.local_dir()
        remote = self.remote()
        if self.root.is_local or not self.root.fs.exists(remote):
            return base
        fs = self.root.fs
        fs.invalidate_cache(remote)
        for entry in fs.ls(remote, detail=True):
            name = entry["name"].rstrip("/").rsplit("/", 1)[-1]
            if entry["type"] == "file" and name in pointers:
                _download(fs, entry["name"], base / name)
            elif entry["type"] == "directory" and folder_number(name, self.prefix) is not None:
                for file in small:
                    local = base / name / file
                    if not local.exists() and fs.exists(f"{entry['name']}/{file}"):
                        _download(fs, f"{entry['name']}/{file}", local)
        return base

    def fetch_file(self, number: int, name: str) -> Path:
        """A file of a folder, fetched from the object store when the mirror lacks it (its local path, which does
        not exist when the root has no such file either)."""
        local = self.folder(number) / name
        remote = self.remote(self.name(number), name)
        if not self.root.is_local and not local.exists() and self.root.fs.exists(remote):
            _download(self.root.fs, remote, local)
        return local

    def fetch(self, number: int, subdir: str | None = None) -> Path:
        """A folder (or its `subdir`) on this machine, fetched whole from the object store the first time, into a
        staging folder of its own (a fetch cut short leaves nothing that looks complete; two processes fetching at
        once do not meet). A `subdir` is renamed into place; a folder, whose manifest `sync` may have fetched alone,
        gets its files one by one, each whole, then its `WHOLE` marker: without it, it is fetched."""
        target = self.folder(number) / subdir if subdir else self.folder(number)
        done = target.exists() if subdir else (target / WHOLE).exists()
        if self.root.is_local or done:
            return target
        staging = target.with_name(f"{target.name}.{uuid.uuid4().hex}.partial")
        staging.parent.mkdir(parents=True, exist_ok=True)
        remote = self.remote(self.name(number), *([subdir] if subdir else []))
        try:
            self.root.fs.get(remote, str(staging), recursive=True)
            if subdir:
                with contextlib.suppress(OSError):  # another process put it in place first: it is as good
                    staging.rename(target)
                return target
            for path in sorted(p for p in staging.rglob("*") if p.is_file()):
                (target / path.relative_to(staging)).parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target / path.relative_to(staging))
            (target / WHOLE).touch()
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target

    def upload(self, number: int, pointers: Collection[str] = ()) -> None:
        """A finished folder, and the `pointers` beside it, put on the object store (nothing to do on a local root):
        what an earlier upload of it left there removed first, its manifest put last, so no reader takes the folder for
        finished before every file of it is there. An upload the store cuts short (StoreUnreachable) leaves the
        mirror as the root is: the folder unfinished (its manifest removed: the next try publishes the same number
        again) and the pointers gone until `sync` fetches the root's."""
        if self.root.is_local:
            return
        fs, folder, remote = self.root.fs, self.folder(number), self.remote(self.name(number))
        files = sorted(path for path in folder.rglob("*")
                       if path.is_file() and path not in (folder / MANIFEST, folder / WHOLE))
        try:
            with reaching_store(self.root, f"publishing {self.uri(self.name(number))}",
                                f"the {self.kind} checkpoints as they were, without {self.name(number)}"):
                fs.invalidate_cache(remote)
                if fs.exists(remote):  # an upload cut short, or a folder published again: its manifest goes first
                    with contextlib.suppress(FileNotFoundError):
                        fs.rm_file(f"{remote}/{MANIFEST}")
                    fs.rm(remote, recursive=True)
                fs.put([str(path) for path in files], [f"{remote}/{path.relative_to(folder).as_posix()}"
                                                       for path in files])
                fs.put_file(str(folder / MANIFEST), f"{remote}/{MANIFEST}")
                for name in pointers:
                    if (self.base / name).exists():
                        fs.put_file(str(self.base / name), self.remote(name))
        except StoreUnreachable:
            for path in (folder / MANIFEST, *(self.base / name for name in pointers)):
                path.unlink(missing_ok=True)
            raise
        (folder / WHOLE).touch()  # the root's folder is this one

    def publish(self, number: int, staged: Path, manifest: dict) -> Path:
        """A folder trained elsewhere (`staged`, on the same file system as the store) moved into place with its
        manifest (atomically on a local root; a folder there before is replaced) and uploaded."""
        write_manifest(staged, manifest)
        fault_point(f"publish.{self.kind}")
        target = self.folder(number)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)
        staged.rename(target)
        self.upload(number)
        return target

    def remote_manifests(self) -> list[str]:
        """The root's path of every finished folder's manifest, read there (no mirror, no weights)."""
        fs, remote = self.root.fs, self.remote()
        if not fs.exists(remote):
            return []
        if not self.root.is_local:
            fs.invalidate_cache(remote)
        folders = [entry.rstrip("/") for entry in fs.ls(remote, detail=False)]
        manifests = [f"{entry}/{MANIFEST}" for entry in folders if folder_number(entry, self.prefix) is not None]
        return [path for path in manifests if fs.exists(path)]

    @contextmanager
    def lock(self, timeout_s: float) -> Iterator[None]:
        """The root lock of this kind's writers: one at a time per root, across processes and hosts (a lease object
        on an object store). LockTimeout when another holds it for over `timeout_s`."""
        with root_lock(self.root, self.lock_name, timeout_s=timeout_s):
            yield
