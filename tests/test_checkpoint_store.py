"""One checkpoint store for reward-model versions and policy checkpoints: a version written on one machine has its
manifest read and its folder fetched into another machine's empty cache (an S3 root on moto, two local caches); and
the store's lock, the root's, keeps two GRPO rounds on one root apart across StorageRoot objects and processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from orchrm_dagster.grpo.checkpoints import ensure_local, policy_store, publish_checkpoint, round_lock
from orchrm_dagster.rm import (MODEL_SUBDIR, RMTrainConfig, build_manifest, latest_version, list_versions,
                               synced_checkpoints_dir, write_manifest)
from orchrm_dagster.rm.checkpoints import model_dir, rm_store, upload_version
from orchrm_dagster.storage import MANIFEST, StorageRoot, read_manifest

BUCKET = "orchrm-store"


@pytest.fixture
def endpoint(s3_endpoint):
    StorageRoot(f"s3://{BUCKET}/team", s3_endpoint).fs.mkdir(BUCKET)
    return s3_endpoint


def on_machine(monkeypatch, tmp_path, name: str, endpoint: str) -> StorageRoot:
    """The S3 root as a machine with its own (at first empty) local cache sees it."""
    monkeypatch.setenv("ORCHRM_CACHE", str(tmp_path / f"cache-{name}"))
    return StorageRoot(f"s3://{BUCKET}/team", endpoint)


def test_a_reward_model_version_written_on_one_machine_is_read_and_fetched_on_another(endpoint, tmp_path,
                                                                                       monkeypatch):
    first = on_machine(monkeypatch, tmp_path, "a", endpoint)
    folder = rm_store(first).folder(1)
    assert str(folder).startswith(str(tmp_path / "cache-a"))  # the first machine's mirror
    (folder / MODEL_SUBDIR).mkdir(parents=True)
    (folder / MODEL_SUBDIR / "weights.bin").write_bytes(b"weights of v1")
    manifest = build_manifest(1, RMTrainConfig(), "fingerprint", 8, 4, {"val_accuracy": 0.75}, 1.0, 8.0)
    write_manifest(str(folder), manifest)
    upload_version(first, 1)

    second = on_machine(monkeypatch, tmp_path, "b", endpoint)
    assert not rm_store(second).folder(1).exists()
    assert latest_version(second) == 1  # synced: the manifest alone, no weights
    [listed] = list_versions(str(synced_checkpoints_dir(second)))
    assert listed["version"] == 1 and listed["metrics"] == {"val_accuracy": 0.75}
    assert not (rm_store(second).folder(1) / MODEL_SUBDIR).exists()
    fetched = model_dir(second, 1)
    assert fetched.startswith(str(tmp_path / "cache-b"))
    assert open(f"{fetched}/weights.bin", "rb").read() == b"weights of v1"
    assert read_manifest(rm_store(second).folder(1)) == read_manifest(folder)
    assert rm_store(second).next_number() == 2  # a fresh machine numbers on, overwriting nothing


def test_a_policy_checkpoint_written_on_one_machine_is_read_and_fetched_on_another(endpoint, tmp_path, monkeypatch):
    first = on_machine(monkeypatch, tmp_path, "a", endpoint)
    staged = tmp_path / "work" / "model"
    staged.mkdir(parents=True)
    (staged / "model.safetensors").write_bytes(b"policy of round 3")
    published = publish_checkpoint(first, 3, staged, {"round": 3, "heldout_problems": ["p9"]})
    assert published == policy_store(first).folder(3) and not staged.exists()

    second = on_machine(monkeypatch, tmp_path, "b", endpoint)
    [remote] = policy_store(second).remote_manifests()
    assert remote.endswith(f"checkpoints/policy/r0003/{MANIFEST}")
    local = ensure_local(second, {"round": 3})
    assert local.startswith(str(tmp_path / "cache-b"))
    assert open(f"{local}/model.safetensors", "rb").read() == b"policy of round 3"
    assert read_manifest(local) == {"round": 3, "heldout_problems": ["p9"]}
    assert not policy_store(second).folder(3).with_name("r0003.partial").exists()
    assert ensure_local(second, {"round": 3}) == local  # fetched once


def _root(kind: str, tmp_path, endpoint_of) -> tuple[str, str | None]:
    if kind == "local":
        return str(tmp_path / "storage"), None
    return f"s3://{BUCKET}/team", endpoint_of()


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_two_storage_root_objects_on_one_root_never_run_two_rounds_at_once(kind, tmp_path, request):
    url, endpoint = _root(kind, tmp_path, lambda: request.getfixturevalue("endpoint"))
    with round_lock(StorageRoot(url, endpoint)):
        with pytest.raises(RuntimeError, match="another GRPO round is running"):
            with round_lock(StorageRoot(url, endpoint)):
                pass
    with round_lock(StorageRoot(url, endpoint)):  # released: the next round runs
        pass


def test_the_round_lock_is_not_mistaken_for_a_lock_failure_inside_the_round(storage_root):
    from orchrm_dagster.storage import LockTimeout

    with pytest.raises(LockTimeout):
        with round_lock(storage_root):
            raise LockTimeout("a lock the round itself waited on")


@pytest.mark.parametrize("kind", ["local", "s3"])
def test_a_round_held_by_another_process_excludes_this_one(kind, tmp_path, request):
    url, endpoint = _root(kind, tmp_path, lambda: request.getfixturevalue("endpoint"))
    holder = textwrap.dedent("""
        import sys
        from orchrm_dagster.storage import StorageRoot, root_lock
        url, endpoint, name = sys.argv[1], sys.argv[2] or None, sys.argv[3]
        with root_lock(StorageRoot(url, endpoint), name, timeout_s=30):
            print("held", flush=True)
            sys.stdin.read()  # until the test closes it
    """)
    lock_name = policy_store(StorageRoot(url, endpoint)).lock_name
    child = subprocess.Popen([sys.executable, "-c", holder, url, endpoint or "", lock_name], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(RuntimeError, match="another GRPO round is running"):
            with round_lock(StorageRoot(url, endpoint)):
                pass
    finally:
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    with round_lock(StorageRoot(url, endpoint)):  # the other process is done: this one runs
        pass
