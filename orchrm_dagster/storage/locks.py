"""A lock on a storage root, for the steps that must not interleave even across Dagster instances or hosts (two
ingests de-duplicating run_ids against each other, two trainings taking the same version number).

On a local root it is a file lock in <root>/.locks/ (the system frees it when its process dies). On S3 it is a lease
object created with a conditional PUT (`If-None-Match: *`, which S3 and its compatibles refuse when the object
exists): the holder renews it every `lease_s / 3` while it holds it (a step may hold it for hours) and deletes it
when done. A lease is broken by the next one to want it once it has expired (its holder died, or lost the network,
`lease_s` ago at most), or at once when its holder was a process of this host that no longer runs (kill -9), or a
holder in this very process that has finished without removing it (the store was unreachable when it let go: a step
run again in the same process, `orchrm loop`'s next attempt, does not wait out the lease).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from filelock import FileLock, Timeout

from orchrm_dagster.storage.root import StorageRoot


class LockTimeout(TimeoutError):
    pass


_HELD_HERE: set[str] = set()  # the tokens of the leases this process holds now
_log = logging.getLogger(__name__)


@contextmanager
def root_lock(root: StorageRoot, name: str, timeout_s: float = 600.0, lease_s: float = 300.0) -> Iterator[None]:
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
    held = threading.Event()
    renewal = threading.Thread(target=_renew, args=(root, path, token, lease_s, held), daemon=True,
                               name=f"orchrm-lease-{name}")
    renewal.start()
    try:
        yield
    finally:
        held.set()
        renewal.join()
        _HELD_HERE.discard(token)
        _release_lease(root, path, token)


def _acquire_lease(root: StorageRoot, path: str, timeout_s: float, lease_s: float) -> str:
    token = uuid.uuid4().hex
    _HELD_HERE.add(token)  # before the lease exists: no other thread of this process takes it for one let go
    try:
        return _put_lease(root, path, token, timeout_s, lease_s)
    except BaseException:
        _HELD_HERE.discard(token)
        raise


def _put_lease(root: StorageRoot, path: str, token: str, timeout_s: float, lease_s: float) -> str:
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
            if _stale(root, path):
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


def _stale(root: StorageRoot, path: str) -> bool:
    """The lease expired, or its holder was a process of this host that is gone, or a holder in this process that
    has let go of it (its release could not reach the store)."""
    try:
        lease = json.loads(root.fs.cat_file(path))
    except (FileNotFoundError, ValueError):
        return False
    if lease.get("expires", float("inf")) < time.time():
        return True
    if lease.get("host") != socket.gethostname():
        return False
    if lease.get("pid") == os.getpid():
        return lease.get("token") not in _HELD_HERE
    return not _running(lease.get("pid"))


def _running(pid) -> bool:
    import psutil

    return isinstance(pid, int) and psutil.pid_exists(pid)


def _renew(root: StorageRoot, path: str, token: str, lease_s: float, held: threading.Event) -> None:
    """Pushes the lease's expiry on while it is held; a missed renewal is retried at the next (the lease outlives
    two). Stops if the lease is no longer this holder's."""
    while not held.wait(lease_s / 3):
        try:
            lease = json.loads(root.fs.cat_file(path))
            if lease.get("token") != token:
                return
            root.fs.pipe_file(path, json.dumps({**lease, "expires": time.time() + lease_s}).encode())
        except Exception:  # noqa: BLE001 (a network error: the lease still holds until it expires)
            continue


def _release_lease(root: StorageRoot, path: str, token: str) -> None:
    """Removes the lease if it is still this holder's. One the store does not let go (unreachable) is left to be
    broken: by this process at once, by another when it expires. What the block raised is never replaced by it."""
    try:
        if json.loads(root.fs.cat_file(path)).get("token") == token:
            root.fs.rm(path)
    except (FileNotFoundError, ValueError):
        pass
    except Exception as error:  # noqa: BLE001 (a network error: the lease expires in lease_s at most)
        _log.warning("could not remove the lease %s (%s: %s); it is broken when it expires, or at once by this "
                     "process", root.to_uri(path), type(error).__name__, error)
