"""Batch replacement by generations (local and S3 alike), and the storage-root lock (file lock, S3 lease)."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from orchrm_dagster.storage import LockTimeout, StorageRoot, root_lock


def part(tmp_path, name: str, values: list[int]) -> str:
    path = str(tmp_path / name)
    pq.write_table(pa.table({"x": values}), path)
    return path


def rows(root: StorageRoot, batch: str) -> list[int]:
    return sorted(v for p in root.batch_files("t", batch) for v in pq.read_table(root.fs.open(p, "rb"))["x"].to_pylist())


@pytest.fixture(params=["local", "s3"])
def root(request, tmp_path):
    if request.param == "local":
        return StorageRoot(str(tmp_path / "root"))
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = f"orchrm-batches-{uuid.uuid4().hex[:8]}"  # moto keeps buckets for the whole process
    root = StorageRoot(f"s3://{bucket}/prefix", endpoint)
    root.fs.mkdir(bucket)
    return root


def test_a_replacement_switches_whole_and_keeps_one_previous_generation(root, tmp_path):
    for generation in range(3):
        root.replace_batch("t", "b", [part(tmp_path, f"a{generation}", [generation, 10 + generation]),
                                      part(tmp_path, f"b{generation}", [20 + generation])])
        assert rows(root, "b") == [generation, 10 + generation, 20 + generation]
    folders = [p for p in root.fs.ls(root.batch_dir("t", "b"), detail=False) if p.rsplit("/", 1)[-1].startswith("g")]
    assert len(folders) == 2  # the current one and the one a reader may still be reading
    assert root.batch_ids("t") == ["b"]


def test_a_crash_before_the_switch_leaves_the_batch_as_it_was(root, tmp_path):
    root.replace_batch("t", "b", [part(tmp_path, "a", [1])])
    orphan = f"{root.batch_dir('t', 'b')}/g99999999999999999999-dead"
    root.fs.makedirs(orphan, exist_ok=True)
    root.fs.put_file(part(tmp_path, "z", [666]), f"{orphan}/part-0000.parquet")  # parts written, no switch
    assert rows(root, "b") == [1]


def test_the_lock_serializes_holders_and_times_out(root):
    order = []

    def hold(name):
        with root_lock(root, "x", timeout_s=30):
            order.append(f"{name}+")
            time.sleep(0.3)
            order.append(f"{name}-")

    threads = [threading.Thread(target=hold, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert order in (["a+", "a-", "b+", "b-"], ["b+", "b-", "a+", "a-"])
    with root_lock(root, "y"):
        with pytest.raises(LockTimeout):
            with root_lock(root, "y", timeout_s=0.3):
                pass


def test_a_dead_holders_s3_lease_is_broken(s3_endpoint):
    root = StorageRoot("s3://orchrm-lease/prefix", s3_endpoint)
    root.fs.mkdir("orchrm-lease")
    root.fs.pipe_file(root.path(".locks", "z.lock"),
                      json.dumps({"token": "gone", "expires": time.time() - 1}).encode())
    with root_lock(root, "z", timeout_s=5):
        assert json.loads(root.fs.cat_file(root.path(".locks", "z.lock")))["token"] != "gone"
    assert not root.fs.exists(root.path(".locks", "z.lock"))


def test_a_held_s3_lease_is_renewed_and_a_dead_local_holders_is_broken_at_once(s3_endpoint):
    import subprocess
    import sys

    root = StorageRoot("s3://orchrm-renew/prefix", s3_endpoint)
    root.fs.mkdir("orchrm-renew")
    lease = root.path(".locks", "r.lock")
    with root_lock(root, "r", lease_s=0.9):  # held three times as long as the lease: renewed meanwhile
        time.sleep(2.7)
        with pytest.raises(LockTimeout):
            with root_lock(StorageRoot("s3://orchrm-renew/prefix", s3_endpoint), "r", timeout_s=0.5):
                pass
    assert not root.fs.exists(lease)

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    root.fs.pipe_file(lease, json.dumps({"token": "killed", "host": socket.gethostname(), "pid": int(gone.stdout),
                                         "expires": time.time() + 3600}).encode())
    started = time.monotonic()
    with root_lock(root, "r", timeout_s=5):  # its holder, a process of this host, no longer runs: no hour's wait
        assert json.loads(root.fs.cat_file(lease))["token"] != "killed"
    assert time.monotonic() - started < 5
