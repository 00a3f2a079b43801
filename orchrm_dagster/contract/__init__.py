"""The artifact contract and every table's schema: what the rest of the engine reads and writes."""

from orchrm_dagster.contract.catalogue import COLUMN_DEFAULTS, PARTITIONED_TABLES, WAREHOUSE_TABLES
from orchrm_dagster.contract.fast_decode import FastRunRecord, fast_record
from orchrm_dagster.contract.identity import plan_hash
from orchrm_dagster.contract.kinds import (BASE_KIND, CHECKPOINT_KIND, POLICY_KINDS, SPECIALIZED_KIND, PolicyKind,
                                           QuarantineKind, RunErrorKind, NO_VERDICT_KINDS)
from orchrm_dagster.contract.record import CONTRACT_VERSION, DEFAULT_ENVIRONMENT, REQUIRED_FIELDS, RunRecord
from orchrm_dagster.contract.tables import CHAMPION_LIVE_ACCURACY
from orchrm_dagster.contract.tables import SCORE_EXPORTS
from orchrm_dagster.contract.tables import (EVALUATION, EVALUATION_PROBLEMS, GRPO_ROUNDS, IMPORTED_PAIRS,
                                            JUDGE_CACHE, LABELS, OFFSHELF_SCORES, ORCHESTRATION_SAMPLES, PAIRS,
                                            PLAN_SCORES, POLICY_CHECKPOINTS, PROBLEMS, QUARANTINE, RM_CHECKPOINTS,
                                            RM_SCORES, RM_TRAINING_PAIRS, RM_TRAINING_PAIRS_FILE, RUNS,
                                            SUBAGENT_CALLS, VERIFIER_SCORES)
from orchrm_dagster.contract.storable import (INT64_MAX, UnstorableValue, check_json, is_utf8, json_text, safe_text,
                                              storable_column, type_name)

__all__ = [
    "CONTRACT_VERSION", "DEFAULT_ENVIRONMENT", "COLUMN_DEFAULTS", "EVALUATION", "EVALUATION_PROBLEMS", "IMPORTED_PAIRS",
    "GRPO_ROUNDS", "JUDGE_CACHE", "OFFSHELF_SCORES", "PLAN_SCORES", "POLICY_CHECKPOINTS", "VERIFIER_SCORES", "LABELS", "ORCHESTRATION_SAMPLES", "PAIRS",
    "PARTITIONED_TABLES", "POLICY_KINDS", "PROBLEMS", "PolicyKind", "QUARANTINE", "QuarantineKind", "REQUIRED_FIELDS",
    "RM_CHECKPOINTS", "RM_SCORES", "SCORE_EXPORTS", "CHAMPION_LIVE_ACCURACY", "RM_TRAINING_PAIRS", "RM_TRAINING_PAIRS_FILE", "RUNS", "RunErrorKind", "NO_VERDICT_KINDS", "RunRecord", "SUBAGENT_CALLS", "BASE_KIND", "CHECKPOINT_KIND", "SPECIALIZED_KIND",
    "WAREHOUSE_TABLES", "plan_hash", "FastRunRecord", "fast_record",
    "INT64_MAX", "UnstorableValue", "check_json", "is_utf8", "json_text", "safe_text", "storable_column", "type_name",
]
