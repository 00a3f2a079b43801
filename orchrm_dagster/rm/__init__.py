"""Reward-model engine: train r(x, z) on win-lose pairs, score plans, measure, version checkpoints (no Dagster).

Names load lazily: importing the package (or its metrics/checkpoints) does not import torch, transformers or TRL.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "LiveAccuracy": "live",
    "StalenessRule": "live",
    "staleness": "live",
    "plan_pairs": "live",
    "pairs_live_accuracy": "live",
    "record_live_accuracy": "live",
    "read_live_accuracy": "live",
    "latest_held_out": "live",
    "live_accuracy_png": "live_plot",
    "validation_accuracy": "versions",
    "CHAMPION_FILE": "champions",
    "Calibration": "calibration",
    "champion_calibration": "calibration",
    "fit_calibration": "calibration",
    "MODEL_SUBDIR": "checkpoints",
    "PAIR_IDS_FILE": "checkpoints",
    "PAIR_PROBLEMS_FILE": "checkpoints",
    "PairTexts": "data",
    "RMTrainConfig": "config",
    "ScoringReport": "run_scores",
    "ScoringSettings": "config",
    "TrainingOutcome": "challenger",
    "backbone_path": "config",
    "champion_scorer": "versions",
    "version_scorer": "versions",
    "champion_version": "versions",
    "checkpoint_table": "versions",
    "pair_problems": "versions",
    "trained_batches": "versions",
    "finished_versions": "versions",
    "PAIR_BATCHES_FILE": "checkpoints",
    "new_pairs_since_training": "versions",
    "latest_version": "versions",
    "batches_to_score": "run_scores",
    "bf16_supported": "config",
    "checkpoints_dir": "checkpoints",
    "current_champions": "versions",
    "domain_scorer": "versions",
    "domain_trainings": "challenger",
    "DomainScorer": "domains",
    "DomainVerdict": "champions",
    "Floor": "floor",
    "NoChampion": "champions",
    "champion_refusals": "versions",
    "champion_standings": "versions",
    "no_champion_reason": "versions",
    "best_of_n_order": "choice",
    "best_of_n_pick": "choice",
    "plan_parses": "choice",
    "all_domains": "domains",
    "benchmark_domains": "domains",
    "domain_of": "domains",
    "newest_champion": "champions",
    "synced_checkpoints_dir": "checkpoints",
    "trained_on": "versions",
    "trained_at": "versions",
    "read_champions": "champions",
    "score_runs": "run_scores",
    "train_new_version": "challenger",
    "retrain_version": "challenger",
    "read_training_pairs": "checkpoints",
    "train_on_current_pairs": "challenger",
    "RewardScorer": "score",
    "resolve_dtype": "score",
    "InputFormat": "template",
    "InputSpec": "template",
    "write_input_spec": "template",
    "load_backbone": "train",
    "load_reward_model": "adapters",
    "memory_estimate": "memory",
    "ModelShape": "memory",
    "MemoryEstimate": "memory",
    "TrainResult": "train",
    "build_manifest": "checkpoints",
    "evaluate_pairs": "score",
    "expected_calibration_error": "metrics",
    "format_input": "template",
    "is_new_champion": "champions",
    "list_versions": "checkpoints",
    "next_version": "checkpoints",
    "pairwise_metrics": "metrics",
    "read_manifest": "checkpoints",
    "synthetic_pairs": "synthetic",
    "train_reward_model": "train",
    "version_dir": "checkpoints",
    "write_manifest": "checkpoints",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)


def __dir__():
    return __all__
