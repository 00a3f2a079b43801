"""Turn valid records into the columns of the `runs` and `subagent_calls` tables, a chunk of records at a time."""

from __future__ import annotations

from typing import Any, NamedTuple

from orchrm_dagster.contract import DEFAULT_ENVIRONMENT, INT64_MAX, RunRecord, UnstorableValue, check_json, json_text, plan_hash

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


class Derived(NamedTuple):
    """What a record's rows hold beyond its own fields."""

    plan_hash: str
    meta: str | None  # the record's meta and unknown fields, as JSON text
    tokens: tuple  # the six token columns, in the RUNS schema's order
    call_extras: list[str | None] | None  # each call's unknown fields as JSON text; None when no call has any


_TOKEN_COLUMNS = len(_token_columns(None))


def derived_values(record) -> Derived:
    """Raises UnstorableValue for a value no table can store."""
    # in the order a record is read: the first value out of range is the one its quarantine row names
    plan = _plan_hash(record.plan)
    tokens = _token_columns(record.tokens)
    meta = record_meta(record)
    calls = record.subagents or ()
    extras = None
    if any(call.model_extra for call in calls):
        extras = [json_text(call.model_extra, f"subagents[{index}]") if call.model_extra else None
                  for index, call in enumerate(calls)]
    return Derived(plan, meta, tokens, extras)


def run_columns(records: list, derived: list[Derived], batch_id: str, source_file: str, line_numbers: list[int]
                ) -> list[list]:
    """The `runs` columns of a chunk of records, in the RUNS schema's order (column-wise: this runs once per
    record). Values are not checked against the columns' storable range here: `contract.storable` does that."""
    n = len(records)
    policies = [record.policy for record in records]
    return [
        [batch_id] * n, [r.run_id for r in records], [r.problem_id for r in records], [r.benchmark for r in records],
        [r.question for r in records],
        [p.name for p in policies], [p.kind for p in policies], [p.step for p in policies],
        [r.plan for r in records], [d.plan_hash for d in derived], [r.reference_answer for r in records],
        [r.sample_index for r in records], [r.final_answer for r in records],
        [len(r.subagents) if r.subagents is not None else None for r in records],
        *([d.tokens[i] for d in derived] for i in range(_TOKEN_COLUMNS)),
        [r.plan_logprob for r in records], [r.is_correct for r in records], [r.error for r in records],
        [r.created_at for r in records], [d.meta for d in derived], [source_file] * n, line_numbers,
        [r.environment or DEFAULT_ENVIRONMENT for r in records],
    ]


def call_columns(records: list, derived: list[Derived], batch_id: str, line_numbers: list[int]
                 ) -> tuple[list[list], list[int]]:
    """The `subagent_calls` columns of a chunk of records, in the SUBAGENT_CALLS schema's order, and each call
    row's record (its index in `records`)."""
    owners, indexes, calls, extras = [], [], [], []
    for row, (record, extra) in enumerate(zip(records, derived)):
        if record.subagents:
            count = len(record.subagents)
            owners.extend([row] * count)
            indexes.extend(range(count))
            calls.extend(record.subagents)
            extras.extend(extra.call_extras or [None] * count)
    return [
        [batch_id] * len(calls), [records[row].run_id for row in owners], indexes,
        [c.agent_id for c in calls], [c.agent_name for c in calls], [c.input for c in calls],
        [c.output for c in calls], [c.prompt_tokens for c in calls], [c.completion_tokens for c in calls],
        [c.model for c in calls], extras,
        [line_numbers[row] for row in owners],  # line_number tells apart the calls of two records sharing a run_id
    ], owners
