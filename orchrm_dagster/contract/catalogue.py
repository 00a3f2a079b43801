"""The warehouse's catalogue of the Parquet tables (the source of truth): every table by name (DuckDB views mirror
these names), what columns added later read as in older files, and which tables are written a folder per partition.
Their Arrow schemas are in `contract.tables`."""

from __future__ import annotations

import pyarrow as pa

from orchrm_dagster.contract.tables import (EVALUATION, EVALUATION_PROBLEMS, JUDGE_CACHE, OFFSHELF_SCORES,
                                                       VERIFIER_SCORES)
from orchrm_dagster.contract.tables import CHAMPION_LIVE_ACCURACY
from orchrm_dagster.contract.tables import SCORE_EXPORTS
from orchrm_dagster.contract.tables import (GRPO_ROUNDS, IMPORTED_PAIRS, PAIRS, PLAN_SCORES, POLICY_CHECKPOINTS,
                                                  RM_CHECKPOINTS, RM_SCORES)
from orchrm_dagster.contract.tables import (LABELS, ORCHESTRATION_SAMPLES, PROBLEMS, QUARANTINE, RUNS,
                                                SUBAGENT_CALLS)

# Every table of the warehouse (a DuckDB view each, over its Parquet files).
WAREHOUSE_TABLES: dict[str, pa.Schema] = {
    "runs": RUNS,
    "subagent_calls": SUBAGENT_CALLS,
    "quarantine": QUARANTINE,
    "labels": LABELS,
    "problems": PROBLEMS,
    "orchestration_samples": ORCHESTRATION_SAMPLES,
    "pairs": PAIRS,
    "imported_pairs": IMPORTED_PAIRS,
    "rm_checkpoints": RM_CHECKPOINTS,
    "rm_scores": RM_SCORES,
    "champion_live_accuracy": CHAMPION_LIVE_ACCURACY,
    "plan_scores": PLAN_SCORES,
    "evaluation": EVALUATION,
    "evaluation_problems": EVALUATION_PROBLEMS,
    "verifier_scores": VERIFIER_SCORES,
    "offshelf_scores": OFFSHELF_SCORES,
    "judge_cache": JUDGE_CACHE,
    "policy_checkpoints": POLICY_CHECKPOINTS,
    "grpo_rounds": GRPO_ROUNDS,
    "score_exports": SCORE_EXPORTS,
}

# What a text column reads as where a file written before the column existed leaves it null (the warehouse views and
# the Polars scans both fill it).
COLUMN_DEFAULTS: dict[str, dict[str, str]] = {"runs": {"environment": "agents"},
                                               "labels": {"label_source": "reference"}}

# Tables written one folder per partition (`batch_id=<key>/part-*.parquet`); the rest are a single file.
# The run-batch tables and rm_scores are partitioned by run batch; orchestration_samples and plan_scores by
# (benchmark, policy); the evaluation tables by evaluation_id (an evaluation appends a folder).
PARTITIONED_TABLES = ("runs", "subagent_calls", "quarantine", "labels", "rm_scores", "orchestration_samples",
                      "plan_scores", "evaluation", "evaluation_problems", "verifier_scores", "judge_cache",
                      "offshelf_scores")
