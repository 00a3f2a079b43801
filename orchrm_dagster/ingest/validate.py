"""Check one source line against the artifact contract: a valid RunRecord, or a Rejection a person can act on."""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from pydantic import ValidationError

from orchrm_dagster.contract import (FastRunRecord, QuarantineKind, RunRecord, UnstorableValue, fast_record, is_utf8,
                                     json_text)
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


def validate_line(line: SourceLine, limits: IngestSettings) -> RunRecord | FastRunRecord | Rejection:
    """The line's record (the fast decoder's when it takes the line, which holds the same values), or why not."""
    if line.oversize_bytes is not None:
        return _reject(
            line, QuarantineKind.OVERSIZE_RECORD, None,
            f"record is {line.oversize_bytes:,} bytes, over max_record_bytes={limits.max_record_bytes:,}",
            limits, truncated=True,
        )
    if line.unreadable is not None:
        return unstorable(line, *line.unreadable, limits)
    try:
        # Parquet rows go through JSON too, so both formats obey exactly the same rules (JSON text would turn a
        # NaN into null: json_text refuses it instead)
        data = line.data if line.record is None else json_text(_decode_embedded_meta(line.record), "", default=str)
        record = fast_record(data) or RunRecord.model_validate_json(data)
    except UnstorableValue as err:
        return unstorable(line, err.field, err.reason, limits)
    except ValidationError as err:
        kind, field, reason = _describe(err)
        return _reject(line, kind, field, reason, limits)
    # the storable range of the values is checked a chunk of records at once, where they are staged (ingest.staging)
    # a field has at most as many characters as its line has bytes: a short line needs no look at its fields
    may_be_oversize = line.data is None or len(line.data) > limits.max_field_chars
    oversize = may_be_oversize and _oversize_field(record, limits.max_field_chars)
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


def unstorable(line: SourceLine, field: str, reason: str, limits: IngestSettings, run_id: str | None = None
               ) -> Rejection:
    """The quarantine entry of a valid record holding a value no table can store (see contract.storable)."""
    return _reject(line, QuarantineKind.UNSTORABLE_VALUE, field, reason, limits, run_id=run_id)


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
                     guessed if guessed is not None and is_utf8(guessed) else None)


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
