"""Turn valid records into rows of the `runs` and `subagent_calls` tables."""

from __future__ import annotations

from datetime import timezone
from typing import Any

import orjson

from orchrm_dagster.contract import RunRecord, plan_hash


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


def _token_columns(tokens) -> tuple:
    if tokens is None:
        return (None,) * 6
    orchestrator, subagents = tokens.orchestrator, tokens.subagents
    if orchestrator is None and tokens.orchestrator_prompt is not None:
        orchestrator = tokens.orchestrator_prompt + (tokens.orchestrator_completion or 0)
    if subagents is None and tokens.subagent_prompt is not None:
        subagents = tokens.subagent_prompt + (tokens.subagent_completion or 0)
    return (orchestrator, subagents, tokens.orchestrator_prompt, tokens.orchestrator_completion,
            tokens.subagent_prompt, tokens.subagent_completion)


def run_row(record: RunRecord, batch_id: str, source_file: str, line_number: int) -> tuple:
    """One `runs` row, in the column order of the RUNS schema (a tuple: this runs once per record)."""
    tokens = record.tokens
    policy = record.policy
    return (
        batch_id, record.run_id, record.problem_id, record.benchmark, record.question,
        policy.name, policy.kind, policy.step,
        record.plan, plan_hash(record.plan), record.reference_answer, record.sample_index, record.final_answer,
        len(record.subagents) if record.subagents is not None else None,
        *_token_columns(tokens),
        record.plan_logprob, record.is_correct, record.error, _utc(record.created_at), record_meta(record),
        source_file, line_number,
    )


def call_rows(record: RunRecord, batch_id: str, line_number: int) -> list[tuple]:
    """`subagent_calls` rows, in the column order of the SUBAGENT_CALLS schema."""
    return [
        (batch_id, record.run_id, index, call.agent_id, call.agent_name, call.input, call.output,
         call.prompt_tokens, call.completion_tokens, call.model,
         orjson.dumps(call.model_extra, default=str).decode() if call.model_extra else None,
         line_number)  # line_number tells apart the calls of two records that share a run_id
        for index, call in enumerate(record.subagents or ())
    ]
