"""Turn valid records into rows of the `runs` and `subagent_calls` tables, buffered column-wise."""

from __future__ import annotations

import hashlib
from datetime import timezone
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract.record import RunRecord


def plan_hash(plan: str) -> str:
    """Identity of a plan up to whitespace: the pair rules compare plans by this."""
    return hashlib.blake2b(" ".join(plan.split()).encode(), digest_size=16).hexdigest()


def record_meta(record: RunRecord) -> str | None:
    """The record's meta with unknown fields folded in (nested ones under 'policy.x' / 'tokens.x')."""
    meta: dict[str, Any] = dict(record.meta or {})
    extras: dict[str, Any] = dict(record.model_extra or {})
    for prefix, part in (("policy", record.policy), ("tokens", record.tokens)):
        for key, value in ((part.model_extra or {}) if part is not None else {}).items():
            extras[f"{prefix}.{key}"] = value
    for key, value in extras.items():
        meta[key if key not in meta else f"unknown.{key}"] = value
    return orjson.dumps(meta, default=str).decode() if meta else None


def _utc(value):
    if value is None:
        return None
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def run_row(record: RunRecord, batch_id: str, source_file: str, line_number: int) -> dict[str, Any]:
    tokens = record.tokens
    return {
        "batch_id": batch_id,
        "run_id": record.run_id,
        "problem_id": record.problem_id,
        "benchmark": record.benchmark,
        "question": record.question,
        "policy_name": record.policy.name,
        "policy_kind": record.policy.kind,
        "policy_step": record.policy.step,
        "plan": record.plan,
        "plan_hash": plan_hash(record.plan),
        "reference_answer": record.reference_answer,
        "sample_index": record.sample_index,
        "final_answer": record.final_answer,
        "n_subagent_calls": len(record.subagents) if record.subagents is not None else None,
        "orchestrator_tokens": tokens.orchestrator if tokens else None,
        "subagent_tokens": tokens.subagents if tokens else None,
        "plan_logprob": record.plan_logprob,
        "is_correct": record.is_correct,
        "error": record.error,
        "created_at": _utc(record.created_at),
        "meta": record_meta(record),
        "source_file": source_file,
        "line_number": line_number,
    }


def call_rows(record: RunRecord, batch_id: str, line_number: int) -> list[dict[str, Any]]:
    rows = []
    for index, call in enumerate(record.subagents or ()):
        extra = call.model_extra
        rows.append({
            "batch_id": batch_id,
            "run_id": record.run_id,
            "call_index": index,
            "agent_id": call.agent_id,
            "agent_name": call.agent_name,
            "input": call.input,
            "output": call.output,
            "prompt_tokens": call.prompt_tokens,
            "completion_tokens": call.completion_tokens,
            "model": call.model,
            "extra": orjson.dumps(extra, default=str).decode() if extra else None,
            "line_number": line_number,  # tells apart the calls of two records that share a run_id
        })
    return rows


class ParquetSink:
    """Appends rows to one Parquet file, flushing a row group every `rows_per_group` rows."""

    def __init__(self, path: str, schema: pa.Schema, rows_per_group: int):
        self.schema = schema
        self.rows_per_group = rows_per_group
        self.columns: dict[str, list] = {name: [] for name in schema.names}
        self.pending = 0
        self.written = 0
        self.writer = pq.ParquetWriter(path, schema, compression="zstd")

    def append(self, row: dict[str, Any]) -> None:
        for name, column in self.columns.items():
            column.append(row.get(name))
        self.pending += 1
        if self.pending >= self.rows_per_group:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.writer.write_table(pa.Table.from_pydict(self.columns, schema=self.schema))
            self.written += self.pending
            self.columns = {name: [] for name in self.schema.names}
            self.pending = 0

    def close(self) -> None:
        self.flush()
        self.writer.close()
