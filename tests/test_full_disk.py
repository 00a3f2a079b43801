"""A disk that fills while a step writes (a real ENOSPC, from a small tmpfs: tests/full_disk.py): a run batch, a
reward-model checkpoint, a policy checkpoint. Each fails with an error naming what it was writing and where; what was
there before (the batches landed, the champion, the policy in use) is intact and still read; once the space is back
the same step succeeds, and nothing lands twice."""

from __future__ import annotations

import os
import re

import pytest

from orchrm_dagster.app.commands import ingest_files, ingest_landed
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.storage import StorageRoot, land

from .conftest import write_lines
from .full_disk import mount_small_disk, small_disk  # noqa: F401  (the fixture)
from .test_faults import count, records

pytestmark = pytest.mark.filterwarnings("ignore")

KiB, MiB = 1 << 10, 1 << 20


def test_small_disk_leaves_the_room_asked_and_gives_it_back(small_disk):
    disk = small_disk(4 * MiB)
    disk.leave(64 * KiB)
    assert disk.free() == 64 * KiB
    with pytest.raises(OSError) as full:
        (disk.root / "big").write_bytes(os.urandom(128 * KiB))
    assert full.value.errno == 28
    disk.give_back()
    assert disk.free() > 3 * MiB


def test_a_machine_that_cannot_mount_one_skips_saying_why(tmp_path):
    with pytest.raises(pytest.skip.Exception, match="cannot mount a tmpfs here: .+"):
        mount_small_disk(tmp_path / "no such folder", MiB)


def _write_with_torch(path):
    import torch

    torch.save({"w": torch.zeros(256, 1024)}, path / "optimizer.pt")


def _write_with_safetensors(path):
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(256, 1024)}, str(path / "model.safetensors"))


def _write_with_pyarrow(path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [os.urandom(512).hex() for _ in range(1024)]}), path / "part.parquet",
                   compression="none")


def _write_with_duckdb(path):
    import duckdb

    duckdb.connect().execute(f"copy (select md5(range::varchar) || md5(range::varchar) s from range(100000)) to "
                             f"'{path / 'part.parquet'}' (compression uncompressed)")


def _write_with_open(path):
    (path / "manifest.json").write_bytes(b"x" * (1 << 20))


@pytest.mark.parametrize("write", [_write_with_torch, _write_with_safetensors, _write_with_pyarrow,
                                   _write_with_duckdb, _write_with_open])
def test_every_writer_s_full_disk_is_told_alike(small_disk, write):
    """One rule for every writer's full disk, whatever it raises: OSError (errno 28), safetensors' and DuckDB's own
    errors, and torch's, which keeps no cause at all."""
    from orchrm_dagster.storage import DiskFull, writing

    disk = small_disk(4 * MiB)
    folder = disk.root / "v0007"
    folder.mkdir()
    disk.leave(256 * KiB)
    with pytest.raises(DiskFull) as full, writing("a test checkpoint v0007", folder):
        write(folder)
    assert full.value.errno == 28 and str(full.value).startswith(
        f"no space left on device writing a test checkpoint v0007 to {folder}")
    assert str(full.value).endswith(": free space and run the step again")
    assert full.value.__cause__ is None and full.value.__suppress_context__  # the step shows this message, not [Errno 28]


def test_a_file_size_limit_is_told_with_its_own_remedy(tmp_path):
    """EFBIG, for real: a process whose file-size limit (ulimit -f) the write passes."""
    import subprocess
    import sys

    code = (
        "import resource, signal, sys\n"
        "from orchrm_dagster.storage import DiskFull, writing\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write fails with EFBIG rather than killing\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
        "try:\n"
        "    with writing('a test table', sys.argv[1]):\n"
        "        open(sys.argv[1], 'wb').write(bytes(1 << 20))\n"
        "except DiskFull as full:\n"
        "    print(full.errno, full)\n")
    target = tmp_path / "data.parquet"
    done = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == (f"27 file too large writing a test table to {target}: raise the file-size limit "
                                   f"(the file system's, or ulimit -f) and run the step again"), done.stderr


def test_other_errors_go_through_as_they_are(small_disk):
    from orchrm_dagster.storage import writing

    disk = small_disk(4 * MiB)
    with pytest.raises(PermissionError), writing("a test checkpoint", disk.root):
        raise PermissionError(13, "Permission denied", str(disk.root / "x"))
    with pytest.raises(RuntimeError, match="CUDA out of memory"), writing("a test checkpoint", disk.root):
        raise RuntimeError("CUDA out of memory")


# ---------------------------------------------------------------- a run batch


def test_a_batch_that_finds_the_disk_full_fails_clearly_keeps_the_last_and_lands_once_after(
        small_disk, tmp_path, monkeypatch):
    disk = small_disk(8 * MiB)
    monkeypatch.setenv("ORCHRM_STORAGE", str(disk.root))
    defs = build_definitions()
    [first] = ingest_files(defs, [write_lines(tmp_path / "first.jsonl", records(4, 1))])
    assert first.status == "SUCCESS" and first.runs == 4
    root = StorageRoot(str(disk.root))
    lines = records(200, 2)
    second = land(root, write_lines(tmp_path / "second.jsonl", lines)).name
    calls_before = count("select count(*) n from subagent_calls")
    # room for the batch's calls (about 23 KB) and quarantine (one page), not for its runs (about 53 KB)
    disk.leave(40 * KiB)

    [failed] = ingest_landed(defs, [second])
    runs_folder = root.batch_dir("runs", second)
    assert failed.status.startswith("FAILURE: ") and (
        f"DiskFull: no space left on device writing run batch {second} (runs) to {runs_folder} (g") in failed.status
    assert failed.status.endswith("/part-0000.parquet): free space and run the step again")
    # the batch before reads whole; nothing of this one is seen, nor left behind to take the space
    assert count("select count(*) n from runs") == 4
    assert count("select count(*) n from subagent_calls") == calls_before
    for table in ("runs", "subagent_calls", "quarantine"):
        assert root.batch_files(table, second) == []
        assert not os.path.exists(root.batch_dir(table, second)) or os.listdir(root.batch_dir(table, second)) == []
    assert disk.free() == 40 * KiB

    disk.give_back()
    [again] = ingest_landed(defs, [second])
    assert again.status == "SUCCESS" and (again.runs, again.quarantined) == (200, 0)
    assert count("select count(*) n from runs") == 204
    assert count("select count(distinct run_id) n from runs") == 204
    assert count(f"select count(*) n from runs where batch_id = '{second}'") == 200
    assert count("select count(*) n from subagent_calls") == calls_before + sum(len(r["subagents"]) for r in lines)


def test_a_full_staging_disk_fails_the_batch_clearly_not_as_a_broken_file(small_disk, storage_root, tmp_path,
                                                                          monkeypatch):
    """An ingest stages its parts in the machine's temporary folder first: a full one there is no truncated input
    file (the read of it was fine), it fails the batch, which lands whole once there is room."""
    import tempfile

    from orchrm_dagster.ingest.batch import ingest_files as ingest_batch_files
    from orchrm_dagster.ingest.settings import IngestSettings
    from orchrm_dagster.storage import DiskFull, batch_members

    disk = small_disk(8 * MiB)
    (disk.mount / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(disk.mount / "tmp"))
    batch = land(storage_root, write_lines(tmp_path / "big.jsonl", records(500, 3))).batch_id
    settings = IngestSettings(rows_per_group=50)  # staged a row group at a time, while the file is read
    disk.leave(64 * KiB)
    staging = re.escape(f"{disk.mount}/tmp/orchrm-ingest-{batch}-")
    with pytest.raises(DiskFull, match=rf"^no space left on device writing run batch {re.escape(batch)} \(its staged "
                                       rf"parts\) to {staging}\w+: free space and run the step again$"):
        ingest_batch_files(storage_root, batch, batch_members(storage_root, batch), settings)
    assert storage_root.batch_files("runs", batch) == [] and os.listdir(disk.mount / "tmp") == []

    disk.give_back()
    report = ingest_batch_files(storage_root, batch, batch_members(storage_root, batch), settings)
    assert (report.runs_written, report.quarantined) == (500, 0)


# ---------------------------------------------------------------- a reward-model checkpoint


def rm_config(backbone: str, seed: int, **changes):
    from orchrm_dagster.rm import RMTrainConfig

    from .rm.toy import NO_FLOOR

    return RMTrainConfig(backbone=backbone, max_length=64, epochs=1, batch_size=4, device="cpu", seed=seed,
                         **NO_FLOOR | changes)


def test_a_reward_model_checkpoint_that_finds_the_disk_full_fails_clearly_keeps_the_champion_and_trains_once_after(
        small_disk, tiny_backbone, monkeypatch):
    from orchrm_dagster.rm import (ScoringSettings, champion_scorer, current_champions, latest_version,
                                   list_versions, train_new_version)
    from orchrm_dagster.rm import challenger as challenger_module
    from orchrm_dagster.rm.checkpoints import checkpoints_dir
    from orchrm_dagster.storage import DiskFull

    from .rm.toy import toy_pairs

    disk = small_disk(64 * MiB)
    root = StorageRoot(str(disk.root))
    first = train_new_version(root, toy_pairs(8, 0), toy_pairs(4, 1), rm_config(tiny_backbone, 0), ["p"])
    assert first.version == 1 and first.is_champion
    champions = current_champions(root)
    question, plan = ["How many eggs?"], ["<agent_name>DebateAgent</agent_name>"]
    score = champion_scorer(root, ScoringSettings(device="cpu"), "math")[1].score(question, plan)
    base, folder = checkpoints_dir(root), checkpoints_dir(root) / "v0002"

    def still_served() -> None:
        """The champion intact and scoring; the half-written version no version."""
        assert current_champions(root) == champions and latest_version(root) == 1
        assert [v["version"] for v in list_versions(str(base))] == [1]
        version, scorer = champion_scorer(root, ScoringSettings(device="cpu"), "math")
        assert version == 1 and scorer.score(question, plan) == score

    # a challenger that always wins its gate: it is crowned once written
    challenger = (toy_pairs(8, 2), toy_pairs(4, 1), rm_config(tiny_backbone, 1, champion_margin=1.0), ["p"])
    # room for the training's small files, not for the model it saves (about 4 MB)
    disk.leave(os.path.getsize(os.path.join(first.path, "model", "model.safetensors")) // 2)
    with pytest.raises(DiskFull) as full:
        train_new_version(root, *challenger)
    assert str(full.value) == (f"no space left on device writing reward-model checkpoint v0002 to {folder}: free "
                               f"space and run the step again")
    still_served()

    # the disk fills again just as the new champion is named: the version is left unfinished, to train again
    disk.give_back()
    write_champions = challenger_module.write_champions

    def fill_then_write(*args):
        disk.leave(0)
        write_champions(*args)

    monkeypatch.setattr(challenger_module, "write_champions", fill_then_write)
    with pytest.raises(DiskFull) as full:
        train_new_version(root, *challenger)
    assert str(full.value) == (f"no space left on device writing the champion pointer crowning reward-model v0002 "
                               f"to {base / 'champion.json'}: free space and run the step again")
    assert not (folder / "manifest.json").exists()
    still_served()

    monkeypatch.setattr(challenger_module, "write_champions", write_champions)
    disk.give_back()
    again = train_new_version(root, *challenger)
    assert again.version == 2 and again.path == str(folder) and again.is_champion
    assert [v["version"] for v in list_versions(str(base))] == [1, 2]
    assert current_champions(root) == dict.fromkeys(champions, 2)
    assert sorted(os.listdir(base)) == ["champion.json", "v0001", "v0002"]


# ---------------------------------------------------------------- a policy checkpoint


@pytest.fixture(scope="session")
def tiny_policy(tmp_path_factory) -> str:
    from tests.tiny_models import make_tiny_policy

    return make_tiny_policy(tmp_path_factory.mktemp("tiny_policy"))


@pytest.mark.slow  # three GRPO rounds of a tiny policy (each mostly its grammar-constrained sampling)
def test_a_policy_checkpoint_that_finds_the_disk_full_fails_clearly_keeps_the_policy_in_use_and_publishes_once_after(
        small_disk, tiny_backbone, tiny_policy):
    from transformers import AutoModelForCausalLM

    from orchrm_dagster.grpo import GRPOSettings, checkpoint_policies, read_table, run_round
    from orchrm_dagster.grpo.checkpoints import policy_store
    from orchrm_dagster.llm import TransformersSpec
    from orchrm_dagster.orchestration import PolicySpec
    from orchrm_dagster.rm import train_new_version
    from orchrm_dagster.storage import DiskFull, local_work_dir

    from .rm.toy import toy_pairs

    disk = small_disk(128 * MiB)
    root = StorageRoot(str(disk.root))
    train_new_version(root, toy_pairs(8, 0), toy_pairs(4, 1), rm_config(tiny_backbone, 0), ["x"])
    # one step of one problem, one held-out plan, promoted on a held-out reward that may fall any amount
    settings = GRPOSettings(policy="tiny", steps=1, group_size=2, train_problems=1, heldout_problems=1,
                            heldout_samples=1, heldout_execute=False, device="cpu", checkpoint_minutes=None,
                            policy_gate="reward_only", policy_margin=1e9)
    registry = {"tiny": PolicySpec(name="tiny", kind="specialized", model=tiny_policy)}
    first = run_round(root, 1, settings, registry, TransformersSpec())
    assert first.row["promoted"]
    [in_use] = read_table(root, "policy_checkpoints")
    assert in_use["in_use"] and in_use["name"] == "grpo-r0001"
    store = policy_store(root)

    def still_served() -> None:
        """The promoted policy intact, in use and loading; nothing of round 2 published or recorded."""
        assert read_table(root, "policy_checkpoints") == [in_use]
        assert [row["round"] for row in read_table(root, "grpo_rounds")] == [1]
        [policy] = checkpoint_policies(root)
        assert policy.name == "grpo-r0001" and policy.checkpoint_path == str(store.folder(1))
        AutoModelForCausalLM.from_pretrained(policy.checkpoint_path)
        assert store.numbers() == [1]

    # room for the round's small files, not for the policy it saves (about 13 MB)
    disk.leave(os.path.getsize(store.folder(1) / "model.safetensors") // 2)
    with pytest.raises(DiskFull) as full:
        run_round(root, 2, settings, registry, TransformersSpec())
    work = local_work_dir(root) / "grpo" / "r0002"
    assert str(full.value) == (f"no space left on device writing policy checkpoint r0002 to {work}: free space and "
                               f"run the step again")
    still_served()

    disk.give_back()
    second = run_round(root, 2, settings, registry, TransformersSpec())
    assert second.row["promoted"] and second.path == str(store.folder(2))
    assert [row["round"] for row in read_table(root, "grpo_rounds")] == [1, 2]
    assert [(row["round"], row["in_use"]) for row in read_table(root, "policy_checkpoints")] == [(1, False), (2, True)]
    assert [p.name for p in checkpoint_policies(root)] == ["grpo-r0001", "grpo-r0002"]
    assert store.numbers() == [1, 2]
