"""Values read out of a trace's spans, whatever the tool wrote: nested metadata as flat keys, JSON held in strings,
a message's text, token counts, times in nanoseconds, ids. The placement rules (`mapping`) and the formats (`otlp`,
`exports`) read spans through these."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import orjson

MAX_DEPTH = 64  # nesting read of a message or metadata value


def flat(value: Any, prefix: str = "", depth: int = 0) -> dict[str, Any]:
    """A metadata object flattened to dotted keys; each nested object's own key is kept too (`a` and `a.b`)."""
    found: dict[str, Any] = {}
    if not isinstance(value, dict) or depth > MAX_DEPTH:
        return found
    for key, item in value.items():
        name = f"{prefix}{key}"
        found[name] = item
        if isinstance(item, dict):
            for inner, nested in flat(item, f"{name}.", depth + 1).items():
                found.setdefault(inner, nested)
    return found


def maybe_json(value: Any) -> Any:
    """A JSON text attribute decoded (message lists are often recorded as JSON text); anything else as it is."""
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


_TEXT_KEYS = ("content", "text", "output", "answer", "final_answer", "result", "input", "question", "query",
              "prompt", "completion")


def text_of(value: Any, role: str | None = None, depth: int = 0) -> str | None:
    """The text a message, a message list or an input/output object holds: of a message list, the last message of
    `role` (else the last message); of a message, its text parts joined; of an object, its first text-like key;
    other JSON as compact JSON text. None when it holds none."""
    if value is None or depth > MAX_DEPTH:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return json_text(value)
    if isinstance(value, list):
        messages = [item for item in value if isinstance(item, dict) and "role" in item]
        if messages:
            chosen = [m for m in messages if m.get("role") == role] or messages
            return text_of(chosen[-1], None, depth + 1)
        if value and all(isinstance(item, list) for item in value):  # LangChain's [[message, ...]] batches
            return text_of(value[0], role, depth + 1)
        texts = [text_of(item, role, depth + 1) for item in value]
        texts = [t for t in texts if t is not None]
        return "".join(texts) if texts and all(_is_part(item) for item in value) else (
            "\n".join(texts) if texts else None)
    if isinstance(value, dict):
        if isinstance(value.get("parts"), list):  # a GenAI message: its text parts
            texts = [part.get("content") for part in value["parts"] if isinstance(part, dict)
                     and part.get("type") == "text" and isinstance(part.get("content"), str)]
            return "".join(texts) if texts else None
        if value.get("type") == "text" and isinstance(value.get("text"), str):
            return value["text"]
        for key in ("messages", "choices", "generations"):
            if isinstance(value.get(key), list) and value[key]:
                inner = value[key] if key == "messages" else value[key][0]
                if key == "choices" and isinstance(inner, dict) and "message" in inner:
                    inner = inner["message"]
                return text_of(inner, role, depth + 1)
        if "message" in value and isinstance(value["message"], dict):
            return text_of(value["message"], role, depth + 1)
        for key in _TEXT_KEYS:
            if key in value and value[key] is not None:
                return text_of(value[key], role, depth + 1)
        if len(value) == 1:
            return text_of(next(iter(value.values())), role, depth + 1)
        return json_text(value) if value else None
    return None


def _is_part(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type") == "text"


def json_text(value: Any) -> str | None:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # an integer past 64 bits
        return repr(value)


def count(value: Any) -> int | None:
    """A token count: an int (OTLP's intValue arrives as text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def nanos(value: Any) -> int:
    """A time as nanoseconds since the epoch: OTLP's unix nanos (text or int), an ISO 8601 text (naive: UTC), or
    epoch seconds/milliseconds as a number; 0 when it is none of these."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, (int, float)):
        if value <= 0 or value != value or value in (float("inf"),):
            return 0
        if value < 1e11:  # seconds
            return int(value * 1e9)
        if value < 1e14:  # milliseconds
            return int(value * 1e6)
        return int(value) if value < 2**63 else 0
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return 0
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        try:
            delta = parsed - datetime(1970, 1, 1, tzinfo=timezone.utc)
        except OverflowError:
            return 0
        return max(0, (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000)
    return 0


def iso_time(ns: int) -> str | None:
    if ns <= 0:
        return None
    try:
        moment = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc).replace(microsecond=(ns % 10**9) // 1000)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.isoformat()


# ---------------------------------------------------------------- placement


def text_id(value: Any) -> str | None:
    """An identifier as text: a non-empty string, or an integer's digits; None for anything else (a bool too)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value else None
