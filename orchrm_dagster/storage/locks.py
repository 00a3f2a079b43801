"""A lock on a storage root, for the steps that must not interleave even across Dagster instances or hosts (two
ingests de-duplicating run_ids against each other, two trainings taking the same version number).

On a local root it is a file lock in <root>/.locks/. On S3 it is a lease object created with a conditional PUT
(`If-None-Match: *`, which S3 and its compatibles refuse when the object exists): the holder deletes it when done;
a lease older than `lease_s` (a holder that died) is broken by the next one to wait for it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from orchrm_dagster.storage.root import StorageRoot


class LockTimeout(TimeoutError):
    pass


@contextmanager
def root_lock(root: StorageRoot, name: str, timeout_s: float = 600.0, lease_s: float = 3600.0) -> Iterator[None]:
    path = root.path(".locks", f"{name}.lock")
    if root.is_local:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = FileLock(path)
        try:
            lock.acquire(timeout=timeout_s)
        except Timeout as busy:
            raise LockTimeout(f"{path}: held by another process for over {timeout_s:.0f} s") from busy
        try:
            yield
        finally:
            lock.release()
        return
    token = _acquire_lease(root, path, timeout_s, lease_s)
    try:
        yield
    finally:
        _release_lease(root, path, token)


def _acquire_lease(root: StorageRoot, path: str, timeout_s: float, lease_s: float) -> str:
    token = uuid.uuid4().hex
    body = json.dumps({"token": token, "host": socket.gethostname(), "pid": os.getpid(),
                       "expires": time.time() + lease_s}).encode()
    bucket, key = path.split("/", 1)
    deadline = time.monotonic() + timeout_s
    wait = 0.1
    while True:
        try:
            _put_if_absent(root, bucket, key, body)
            return token
        except FileExistsError:
            if _expired(root, path):
                root.fs.rm(path)  # its holder died: break the lease
                continue
        if time.monotonic() > deadline:
            raise LockTimeout(f"{root.to_uri(path)}: held by another host or process for over {timeout_s:.0f} s")
        time.sleep(wait)
        wait = min(wait * 2, 2.0)


def _put_if_absent(root: StorageRoot, bucket: str, key: str, body: bytes) -> None:
    from s3fs.core import sync

    sync(root.fs.loop, root.fs._call_s3, "put_object", Bucket=bucket, Key=key, Body=body, IfNoneMatch="*")
    root.fs.invalidate_cache(f"{bucket}/{key}")


def _expired(root: StorageRoot, path: str) -> bool:
    try:
        return json.loads(root.fs.cat_file(path))["expires"] < time.time()
    except (FileNotFoundError, ValueError, KeyError):
        return False


def _release_lease(root: StorageRoot, path: str, token: str) -> None:
    try:
        if json.loads(root.fs.cat_file(path)).get("token") == token:
            root.fs.rm(path)
    except (FileNotFoundError, ValueError):
        pass
