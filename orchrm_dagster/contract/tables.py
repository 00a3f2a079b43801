"""Arrow schemas of the Parquet tables (the source of truth). DuckDB views mirror these names."""

from __future__ import annotations

import pyarrow as pa

RUNS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("question", pa.string()),
        ("policy_name", pa.string()),
        ("policy_kind", pa.string()),
        ("policy_step", pa.int64()),
        ("plan", pa.string()),
        ("plan_hash", pa.string()),
        ("reference_answer", pa.string()),
        ("sample_index", pa.int64()),
        ("final_answer", pa.string()),
        ("n_subagent_calls", pa.int64()),
        ("orchestrator_tokens", pa.int64()),
        ("subagent_tokens", pa.int64()),
        ("orchestrator_prompt_tokens", pa.int64()),
        ("orchestrator_completion_tokens", pa.int64()),
        ("subagent_prompt_tokens", pa.int64()),
        ("subagent_completion_tokens", pa.int64()),
        ("plan_logprob", pa.float64()),
        ("is_correct", pa.bool_()),
        ("error", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("meta", pa.string()),  # JSON text: the record's meta plus any unknown fields
        ("source_file", pa.string()),
        ("line_number", pa.int64()),
    ]
)

SUBAGENT_CALLS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("call_index", pa.int64()),
        ("agent_id", pa.string()),
        ("agent_name", pa.string()),
        ("input", pa.string()),
        ("output", pa.string()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("model", pa.string()),
        ("extra", pa.string()),  # JSON text of unknown keys of the sub-agent object
        ("line_number", pa.int64()),  # the run's line in its batch file
    ]
)

QUARANTINE = pa.schema(
    [
        ("batch_id", pa.string()),
        ("source_file", pa.string()),
        ("line_number", pa.int64()),
        ("run_id", pa.string()),
        ("field", pa.string()),
        ("reason", pa.string()),
        ("raw", pa.string()),
        ("raw_truncated", pa.bool_()),
    ]
)

LABELS = pa.schema(
    [
        ("batch_id", pa.string()),
        ("run_id", pa.string()),
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("answer_type", pa.string()),
        ("reference_answer", pa.string()),
        ("is_correct", pa.bool_()),
        ("extracted_answer", pa.string()),
        ("score", pa.float64()),
        ("labeler", pa.string()),
        ("labeler_version", pa.string()),
        ("reason", pa.string()),
        ("producer_is_correct", pa.bool_()),
    ]
)

PROBLEMS = pa.schema(
    [
        ("problem_id", pa.string()),
        ("benchmark", pa.string()),
        ("split", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("answer_type", pa.string()),
        ("choices", pa.list_(pa.string())),
        ("meta", pa.string()),
        ("source", pa.string()),
    ]
)

TABLE_SCHEMAS: dict[str, pa.Schema] = {
    "runs": RUNS,
    "subagent_calls": SUBAGENT_CALLS,
    "quarantine": QUARANTINE,
    "labels": LABELS,
    "problems": PROBLEMS,
}

# Tables written one Parquet file per run batch; the rest are a single file.
BATCH_PARTITIONED = ("runs", "subagent_calls", "quarantine", "labels")
