"""Policy checkpoints in the checkpoint store (`storage.CheckpointStore`): one folder per GRPO round,
`checkpoints/policy/rNNNN/` (the model, its tokenizer and a manifest), the round lock, the `policy_checkpoints` table
that lists them, and the base model a first round starts from."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa

from orchrm_dagster.contract import GRPO_ROUNDS, POLICY_CHECKPOINTS
from orchrm_dagster.orchestration import PolicySpec
from orchrm_dagster.storage import (MANIFEST, CheckpointStore, LockTimeout, StorageRoot, folder_name, local_work_dir,
                                    writing)

# what a round spent, by kind (grpo_rounds columns): the rounds' table, the asset's metadata and the manifest show them
TOKEN_COLUMNS = ("generation_tokens", "reward_tokens", "rollout_tokens", "training_tokens", "heldout_tokens")


def round_tokens(row: dict) -> int:
    """Every token a round spent (a column missing or empty in an older row: none of that kind)."""
    return sum(row.get(column) or 0 for column in TOKEN_COLUMNS)


ROUND_PREFIX = "r"
ROUND_LOCK = "grpo_rounds"  # the root lock two rounds never hold at once, on any host (storage.root_lock: a lease
# renewed while the round runs on an object store, broken once its holder is gone)


def policy_store(root: StorageRoot) -> CheckpointStore:
    return CheckpointStore(root, "policy", ROUND_PREFIX, ROUND_LOCK)


def round_name(round_number: int) -> str:
    return folder_name(ROUND_PREFIX, round_number)


def policy_name(round_number: int) -> str:
    """The name a round's checkpoint has as a policy (a `policies` partition key)."""
    return f"grpo-{round_name(round_number)}"


@contextmanager
def round_lock(root: StorageRoot) -> Iterator[None]:
    """Held while a round runs: a second round on the same root, from any process or host, fails at once rather
    than queue behind it."""
    with ExitStack() as held:
        try:
            held.enter_context(policy_store(root).lock(timeout_s=0))
        except LockTimeout as busy:
            raise RuntimeError(f"another GRPO round is running (lock {ROUND_LOCK} on {root.url}); rounds never "
                               f"run at once") from busy
        yield


def publish_checkpoint(root: StorageRoot, round_number: int, staged: Path, manifest: dict) -> Path:
    """Moves a finished round's model folder into place (atomically for a local root) with its manifest, and
    uploads it when the root is remote. Nothing is published for a round that failed."""
    with writing(f"policy checkpoint {round_name(round_number)}", staged):  # its manifest
        return policy_store(root).publish(round_number, staged, manifest)


def ensure_local(root: StorageRoot, row: dict) -> str:
    """The checkpoint's model folder on this machine (downloaded from the root when it is remote)."""
    return str(policy_store(root).fetch(row["round"]))


def policy_manifest(root: StorageRoot, round_number: int) -> dict:
    """The manifest of a round's published checkpoint (its base model, reward mode, problems and token costs),
    fetched alone from an object store (the weights stay there until used)."""
    return json.loads(policy_store(root).fetch_file(round_number, MANIFEST).read_text())


_SCHEMAS = {"policy_checkpoints": POLICY_CHECKPOINTS, "grpo_rounds": GRPO_ROUNDS}
# Rows written before the policy gate existed: every checkpoint was promoted then; before training methods existed:
# every round was GRPO (its training tokens were not counted); before environments: held-out plans ran on real agents
# (and no gate decided on measured accuracy: `gate` stays null, so such a checkpoint does not count as verified).
_OLD_ROW_DEFAULTS = {"promoted": True, "reason": "published before the policy gate", "method": "grpo",
                     "environment": "agents"}


def read_table(root: StorageRoot, table: str) -> list[dict]:
    path = root.table_file(table)
    if not root.exists(path):
        return []
    rows = root.read_table(path).to_pylist()
    names = _SCHEMAS[table].names
    return [{name: row.get(name, _OLD_ROW_DEFAULTS.get(name)) for name in names} for row in rows]


def append_row(root: StorageRoot, table: str, row: dict, key: str = "round") -> None:
    """Writes `table` with `row` added (a row with the same `key` is replaced); these tables are small. In
    `policy_checkpoints`, `in_use` marks the latest promoted checkpoint."""
    rows = sorted([r for r in read_table(root, table) if r[key] != row[key]] + [row], key=lambda r: r[key])
    if table == "policy_checkpoints":
        in_use = max((r["round"] for r in rows if r["promoted"]), default=None)
        rows = [{**r, "in_use": r["round"] == in_use} for r in rows]
    path = root.table_file(table)
    with writing(f"the {table} row of round {row[key]}", path):
        root.write_table(pa.Table.from_pylist(rows, schema=_SCHEMAS[table]), path)


def checkpoint_row(round_number: int, path: str, base_model: str, reward_mode: str, rm_version: int,
                   policy: PolicySpec, promoted: bool) -> dict:
    return {"round": round_number, "name": policy_name(round_number), "path": path, "base_model": base_model,
            "reward_mode": reward_mode, "rm_version": rm_version, "prompt": policy.prompt,
            "max_agents": policy.max_agents, "max_new_tokens": policy.max_new_tokens,
            "created_at": datetime.now(timezone.utc).isoformat(), "promoted": promoted, "in_use": promoted}


def checkpoint_policies(root: StorageRoot) -> list[PolicySpec]:
    """Every trained checkpoint as a policy of kind `checkpoint` the runner samples from: being in the table is
    what makes it one, no code or config change."""
    return [PolicySpec(name=row["name"], kind="checkpoint",
                       checkpoint_path=ensure_local(root, row), step=row["round"], prompt=row["prompt"],
                       max_agents=row["max_agents"], max_new_tokens=row["max_new_tokens"], temperature=1.0)
            for row in read_table(root, "policy_checkpoints")]


def base_model_dir(root: StorageRoot, model: str | None) -> str:
    """A Hugging Face folder of the policy's model that a trainer can load: `model` itself when it is one, else the
    embedded SmolLM2 GGUF, de-quantized to fp32 and saved once under the work folder."""
    if model is not None:
        return model
    target = local_work_dir(root) / "models" / "smollm2-135m-instruct"
    if (target / "config.json").exists():
        return str(target)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from orchrm_dagster.llm import EMBEDDED_GGUF, embedded_model_dir

    folder = str(embedded_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=EMBEDDED_GGUF)
    model_ = AutoModelForCausalLM.from_pretrained(folder, gguf_file=EMBEDDED_GGUF, dtype=torch.float32)
    model_.hf_quantizer = None  # de-quantized already; save_pretrained refuses a model that still names one
    model_.config.quantization_config = None
    del model_.config.quantization_config
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model_.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    staging.rename(target)
    return str(target)
