"""Turn valid records into rows of the `runs` and `subagent_calls` tables."""

from __future__ import annotations

from typing import Any

from orchrm_dagster.contract import INT64_MAX, RunRecord, UnstorableValue, check_json, json_text, plan_hash

# The record field each `runs` column holds, where the names differ (what a quarantined line's `field` names).
RUN_COLUMN_FIELDS = {
    "policy_name": "policy.name", "policy_kind": "policy.kind", "policy_step": "policy.step",
    "orchestrator_tokens": "tokens.orchestrator", "subagent_tokens": "tokens.subagents",
    "orchestrator_prompt_tokens": "tokens.orchestrator_prompt",
    "orchestrator_completion_tokens": "tokens.orchestrator_completion",
    "subagent_prompt_tokens": "tokens.subagent_prompt", "subagent_completion_tokens": "tokens.subagent_completion",
}


def record_meta(record: RunRecord) -> str | None:
    """The record's meta with unknown fields folded in (nested ones under 'policy.x' / 'tokens.x'), as JSON text;
    raises UnstorableValue for a value JSON text cannot hold."""
    meta: dict[str, Any] = dict(record.meta or {})
    extras: dict[str, Any] = dict(record.model_extra or {})
    for prefix, part in (("policy", record.policy), ("tokens", record.tokens)):
        for key, value in ((part.model_extra or {}) if part is not None else {}).items():
            extras[f"{prefix}.{key}"] = value
    for key, value in extras.items():
        check_json(value, key)  # a value out of range is named where the record holds it, not where meta keeps it
        meta[key if key not in meta else f"unknown.{key}"] = value
    return json_text(meta, "meta") if meta else None


def _plan_hash(plan: str) -> str:
    try:
        return plan_hash(plan)
    except UnicodeEncodeError:
        raise UnstorableValue("plan", "text holds a lone surrogate (not encodable as UTF-8)") from None


def _total(prompt: int, completion: int | None, part: str) -> int | None:
    """A total the record leaves out, prompt + completion; when it does not fit the column the error names the
    record's own fields, not the column it would have filled. None when a part alone is out of range: its own column
    check names it."""
    if max(prompt, completion or 0) > INT64_MAX:
        return None
    total = prompt + (completion or 0)
    if total > INT64_MAX:
        raise UnstorableValue(f"tokens.{part}_prompt", f"tokens.{part}_prompt + tokens.{part}_completion = {total} "
                                                       f"(the {part} total) does not fit in 64 bits")
    return total


def _token_columns(tokens) -> tuple:
    if tokens is None:
        return (None,) * 6
    orchestrator, subagents = tokens.orchestrator, tokens.subagents
    if orchestrator is None and tokens.orchestrator_prompt is not None:
        orchestrator = _total(tokens.orchestrator_prompt, tokens.orchestrator_completion, "orchestrator")
    if subagents is None and tokens.subagent_prompt is not None:
        subagents = _total(tokens.subagent_prompt, tokens.subagent_completion, "subagent")
    return (orchestrator, subagents, tokens.orchestrator_prompt, tokens.orchestrator_completion,
            tokens.subagent_prompt, tokens.subagent_completion)


def run_row(record: RunRecord, batch_id: str, source_file: str, line_number: int) -> tuple:
    """One `runs` row, in the column order of the RUNS schema (a tuple: this runs once per record). Its values are
    not checked against the columns' storable range here: `contract.storable` checks a chunk of rows at once."""
    tokens = record.tokens
    policy = record.policy
    return (
        batch_id, record.run_id, record.problem_id, record.benchmark, record.question,
        policy.name, policy.kind, policy.step,
        record.plan, _plan_hash(record.plan), record.reference_answer, record.sample_index, record.final_answer,
        len(record.subagents) if record.subagents is not None else None,
        *_token_columns(tokens),
        record.plan_logprob, record.is_correct, record.error, record.created_at, record_meta(record),
        source_file, line_number,
    )


def call_rows(record: RunRecord, batch_id: str, line_number: int) -> list[tuple]:
    """`subagent_calls` rows, in the column order of the SUBAGENT_CALLS schema."""
    return [
        (batch_id, record.run_id, index, call.agent_id, call.agent_name, call.input, call.output,
         call.prompt_tokens, call.completion_tokens, call.model,
         json_text(call.model_extra, f"subagents[{index}]") if call.model_extra else None,
         line_number)  # line_number tells apart the calls of two records that share a run_id
        for index, call in enumerate(record.subagents or ())
    ]
