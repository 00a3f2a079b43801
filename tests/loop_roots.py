"""Storage roots in the states the loop knows, written as the readers read them (a reward model's manifest and
champion pointer, the grpo_rounds table), without training anything."""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import GRPO_ROUNDS, RM_SCORES
from orchrm_dagster.rm import RMTrainConfig, all_domains
from orchrm_dagster.rm.champions import crowned, gate, write_champions
from orchrm_dagster.rm.checkpoints import build_manifest, checkpoints_dir, version_dir, write_manifest


def write_reward_model(root, version: int, right: int, validation_pairs: dict[str, int],
                       config: RMTrainConfig = RMTrainConfig(), created_at: str | None = None) -> dict:
    """Reward-model `version` as training leaves it, judged by the real gate: `right` of its validation pairs
    (`validation_pairs`: domain -> count, in that order) ranked right; crowned where the gate says; it saw every pair
    there is (no retraining is due). Returns the verdicts."""
    domains = [d for d, count in validation_pairs.items() for _ in range(count)]
    wins = np.arange(len(domains)) < right
    base = checkpoints_dir(root)
    judged = gate(wins, {}, domains, all_domains(), {}, config.champion_margin, config.floor(), version)
    metrics = {"val_accuracy": float(wins.mean()) if len(wins) else None, "is_champion": False,
               "accuracy_by_domain": judged.accuracy_by_domain,
               "verdicts": {d: asdict(v) for d, v in judged.verdicts.items()}}
    manifest = build_manifest(version, config, f"fingerprint{version}", 100, len(domains), metrics, 1.0, 10.0)
    manifest["domains"] = list(all_domains())
    manifest["pairs_available"] = 10**9  # pairs in the tables when it trained: none is new since
    if created_at is not None:
        manifest["created_at"] = created_at
    folder = version_dir(str(base), version)
    Path(folder).mkdir(parents=True, exist_ok=True)
    write_manifest(folder, manifest)
    champions = crowned({}, judged.verdicts, version)
    if champions:
        write_champions(base, champions)
    return judged.verdicts


def write_scores(root, version: int) -> None:
    """Every ingested run scored by reward-model `version` (as `rm_scores` writes them, a batch a partition)."""
    for batch in root.batch_ids("runs"):
        runs = pa.concat_tables([pq.read_table(root.fs.open(path)) for path in root.batch_files("runs", batch)])
        ids = runs.column("run_id").to_pylist()
        scores = pa.table({"batch_id": [batch] * len(ids), "run_id": ids, "rm_version": [version] * len(ids),
                           "score": [0.5] * len(ids), "tokens": [10] * len(ids)}, schema=RM_SCORES)
        path = Path(tempfile.mkdtemp(), "scores.parquet")
        pq.write_table(scores, path)
        root.replace_batch("rm_scores", batch, [str(path)])


def round_row(number: int, **changes) -> dict:
    row = dict.fromkeys(GRPO_ROUNDS.names)
    row |= {"round": number, "policy_checkpoint": f"grpo-r{number:04d}", "reward_mode": "orchrm", "rm_version": 1,
            "steps": 2, "mean_reward": 0.4, "kl": 0.01, "generation_tokens": 1000, "reward_tokens": 500,
            "rollout_tokens": 0, "training_tokens": 200, "heldout_reward_before": 0.1, "heldout_reward_after": 0.3,
            "heldout_accuracy": 0.5, "heldout_accuracy_before": 0.5, "seconds": 1.0, "method": "grpo",
            "promoted": True, "verdict": "promoted", "reason": "accuracy rose", "environment": "agents",
            "gate": "accuracy", "reward_hacking": False, "confidence": 0.95, "heldout_plans_before": 20,
            "heldout_plans_after": 20, "heldout_correct_before": 10, "heldout_correct_after": 10,
            "heldout_accuracy_low_before": 0.3, "heldout_accuracy_high_before": 0.7,
            "heldout_accuracy_low_after": 0.3, "heldout_accuracy_high_after": 0.7}
    return row | changes


def write_rounds(root, rows: list[dict]) -> None:
    """The rounds' rows, and their checkpoints' rows in policy_checkpoints (a committed round's checkpoint is
    registered: `grpo.commit_round`)."""
    from orchrm_dagster.grpo.checkpoints import append_row
    from orchrm_dagster.storage import Warehouse

    root.write_table(pa.Table.from_pylist(rows, schema=GRPO_ROUNDS), root.table_file("grpo_rounds"))
    for row in rows:
        if row["policy_checkpoint"] is not None:
            append_row(root, "policy_checkpoints", {
                "round": row["round"], "name": row["policy_checkpoint"], "path": f"checkpoints/policy/r{row['round']:04d}",
                "base_model": "base", "reward_mode": row["reward_mode"], "rm_version": row["rm_version"],
                "prompt": "orchestrator", "max_agents": 4, "max_new_tokens": 512, "created_at": "2026-01-01T00:00:00",
                "promoted": row["promoted"], "in_use": row["promoted"]})
    Warehouse(root).refresh_views(("grpo_rounds", "policy_checkpoints"))  # as the round's asset does


def read_json(text: str) -> dict:
    return json.loads(text)
