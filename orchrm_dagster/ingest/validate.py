"""Check one source line against the artifact contract: a valid RunRecord, or a Rejection a person can act on."""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson
from pydantic import ValidationError

from orchrm_dagster.contract import QuarantineKind, RunRecord
from orchrm_dagster.ingest.flatten import record_meta
from orchrm_dagster.ingest.reader import SourceLine
from orchrm_dagster.ingest.settings import IngestSettings

_SHOWN_ERRORS = 3


@dataclass(frozen=True)
class Rejection:
    line_number: int
    kind: QuarantineKind
    field: str | None
    reason: str
    raw: str
    raw_truncated: bool
    run_id: str | None = None


def validate_line(line: SourceLine, limits: IngestSettings) -> RunRecord | Rejection:
    if line.oversize_bytes is not None:
        return _reject(
            line, QuarantineKind.OVERSIZE_RECORD, None,
            f"record is {line.oversize_bytes:,} bytes, over max_record_bytes={limits.max_record_bytes:,}",
            limits, truncated=True,
        )
    try:
        # Parquet rows go through JSON too, so both formats obey exactly the same rules
        data = line.data if line.record is None else orjson.dumps(_decode_embedded_meta(line.record), default=str)
        record = RunRecord.model_validate_json(data)
    except ValidationError as err:
        kind, field, reason = _describe(err)
        return _reject(line, kind, field, reason, limits)
    unstorable = unstorable_value(record)
    if unstorable:
        field, reason = unstorable
        return _reject(line, QuarantineKind.UNSTORABLE_VALUE, field, reason, limits, run_id=_text_or_none(record.run_id))
    oversize = _oversize_field(record, limits.max_field_chars)
    if oversize:
        field, size = oversize
        return _reject(line, QuarantineKind.OVERSIZE_FIELD, field,
                       f"field is {size:,} characters, over max_field_chars={limits.max_field_chars:,}",
                       limits, run_id=record.run_id)
    return record


def _decode_embedded_meta(record: dict) -> dict:
    # Parquet producers often store `meta` as JSON text; the contract wants an object.
    meta = record.get("meta")
    if isinstance(meta, str):
        try:
            record = {**record, "meta": orjson.loads(meta)}
        except orjson.JSONDecodeError:
            pass
    return record


def _describe(err: ValidationError) -> tuple[QuarantineKind, str | None, str]:
    errors = err.errors(include_url=False)
    first = errors[0]
    if first["type"] == "json_invalid":
        detail = first["ctx"].get("error", first["msg"]) if first.get("ctx") else first["msg"]
        return QuarantineKind.MALFORMED_JSON, None, f"malformed JSON: {detail}"
    if first["type"] == "model_type" and not first["loc"]:
        return (QuarantineKind.NOT_AN_OBJECT, None,
                f"a record must be a JSON object, got {type(first['input']).__name__}")
    parts = [_one_error(e) for e in errors[:_SHOWN_ERRORS]]
    more = f" (and {len(errors) - _SHOWN_ERRORS} more)" if len(errors) > _SHOWN_ERRORS else ""
    return QuarantineKind.INVALID_FIELD, _loc(first["loc"]), "; ".join(parts) + more


def _one_error(error: dict) -> str:
    where = _loc(error["loc"]) or "record"
    if error["type"] == "missing":
        return f"{where}: required field is missing"
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{where}: {error['msg']} (got {shown})"


def _loc(loc: tuple) -> str | None:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or None


_INT64 = (-(2**63), 2**63 - 1)
_TEXT_FIELDS = ("run_id", "problem_id", "benchmark", "question", "plan", "reference_answer", "final_answer", "error")


def unstorable_value(record: RunRecord) -> tuple[str, str] | None:
    """A value the contract accepts but the tables cannot store, as (field, reason): an integer outside 64 bits,
    a number that is not finite, text that is not encodable UTF-8 (a lone surrogate), extra fields that do not
    serialize to JSON."""
    integers = [("sample_index", record.sample_index), ("policy.step", record.policy.step)]
    if record.tokens is not None:
        integers += [(f"tokens.{name}", getattr(record.tokens, name)) for name in type(record.tokens).model_fields]
    for i, call in enumerate(record.subagents or ()):
        integers += [(f"subagents[{i}].prompt_tokens", call.prompt_tokens),
                     (f"subagents[{i}].completion_tokens", call.completion_tokens)]
    for name, value in integers:
        if value is not None and not _INT64[0] <= value <= _INT64[1]:
            return name, f"integer {value} does not fit in 64 bits"
    if record.plan_logprob is not None and not math.isfinite(record.plan_logprob):
        return "plan_logprob", f"{record.plan_logprob} is not a finite number"
    texts = [(name, getattr(record, name)) for name in _TEXT_FIELDS] + [("policy.name", record.policy.name)]
    for i, call in enumerate(record.subagents or ()):
        texts += [(f"subagents[{i}].{name}", getattr(call, name)) for name in ("agent_id", "input", "output")]
    for name, value in texts:
        if value is not None and not _encodable(value):
            return name, "text holds a lone surrogate (not encodable as UTF-8)"
    try:
        record_meta(record)
    except (TypeError, ValueError) as err:
        return "meta", f"does not serialize to JSON: {err}"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _text_or_none(text: str) -> str | None:
    return text if _encodable(text) else None


def _oversize_field(record: RunRecord, limit: int) -> tuple[str, int] | None:
    for name in ("question", "plan", "final_answer", "reference_answer", "error"):
        value = getattr(record, name)
        if value is not None and len(value) > limit:
            return name, len(value)
    for i, call in enumerate(record.subagents or ()):
        for name in ("input", "output"):
            value = getattr(call, name)
            if value is not None and len(value) > limit:
                return f"subagents[{i}].{name}", len(value)
    return None


def _reject(line: SourceLine, kind: QuarantineKind, field: str | None, reason: str, limits: IngestSettings,
            truncated: bool = False, run_id: str | None = None) -> Rejection:
    raw = line.data.decode("utf-8", errors="replace") if line.data is not None else _record_text(line.record)
    raw = raw.rstrip("\n")
    if len(raw) > limits.max_raw_chars:
        raw, truncated = raw[: limits.max_raw_chars], True
    guessed = run_id or _guess_run_id(line)
    return Rejection(line.line_number, kind, field, reason, raw, truncated,
                     guessed if guessed is not None and _encodable(guessed) else None)


def _record_text(record: dict) -> str:
    try:
        return orjson.dumps(record, default=str).decode()
    except TypeError:  # an integer past 64 bits: orjson refuses it, repr shows it
        return repr(record)


def _guess_run_id(line: SourceLine) -> str | None:
    if line.record is not None:
        value = line.record.get("run_id")
        return value if isinstance(value, str) else None
    try:
        value = orjson.loads(line.data).get("run_id")
    except (orjson.JSONDecodeError, AttributeError, TypeError):
        return None
    return value if isinstance(value, str) else None
