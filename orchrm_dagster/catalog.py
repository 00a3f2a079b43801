"""Every table of the warehouse: its Arrow schema and whether it is stored one folder per run batch."""

from __future__ import annotations

import pyarrow as pa

from orchrm_dagster.contract.tables import BATCH_PARTITIONED, TABLE_SCHEMAS
from orchrm_dagster.pairs.build import PAIRS
from orchrm_dagster.pairs.published import IMPORTED_PAIRS

RM_CHECKPOINTS = pa.schema([
    ("version", pa.int64()),
    ("path", pa.string()),
    ("backbone", pa.string()),
    ("n_train_pairs", pa.int64()),
    ("n_validation_pairs", pa.int64()),
    ("val_accuracy", pa.float64()),
    ("champion_val_accuracy", pa.float64()),  # the champion's accuracy on the same validation pairs
    ("ece", pa.float64()),
    ("length_spearman", pa.float64()),
    ("pairs_per_second", pa.float64()),
    ("pair_set_fingerprint", pa.string()),
    ("is_champion", pa.bool_()),
    ("created_at", pa.string()),
])

RM_SCORES = pa.schema([
    ("batch_id", pa.string()),
    ("run_id", pa.string()),
    ("rm_version", pa.int64()),
    ("score", pa.float64()),
    ("tokens", pa.int64()),
])

WAREHOUSE_TABLES: dict[str, pa.Schema] = {
    **TABLE_SCHEMAS,
    "pairs": PAIRS,
    "imported_pairs": IMPORTED_PAIRS,
    "rm_checkpoints": RM_CHECKPOINTS,
    "rm_scores": RM_SCORES,
}
PARTITIONED_TABLES = (*BATCH_PARTITIONED, "rm_scores")
