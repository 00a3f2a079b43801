"""What the tables can store: the storable range of every value a record brings, one rule for every caller.

A record can be valid (the contract's types) and still hold a value no table column can keep. The range is the
column's Arrow type, narrowed so that every reader (Python, DuckDB, Polars) gets the value back as it came in:

- integers: 64-bit signed, [-2**63, 2**63 - 1];
- numbers: finite (no NaN, no infinity; JSON `1e400` parses to infinity);
- text: encodable as UTF-8 (no lone surrogate);
- timestamps: years 1 to 9999 once normalised to UTC (what a Python `datetime` holds);
- JSON objects kept as text (`meta`, unknown fields): each of their values obeys the same ranges, and nesting is
  at most `MAX_JSON_DEPTH` deep.

Columns are checked whole (Arrow converts and compares them vectorised); only a column that fails is checked
value by value, so a bad value costs its own row and nothing else.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pyarrow as pa

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
MAX_JSON_DEPTH = 200  # orjson refuses deeper; pydantic's JSON parser stops near the same depth
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_EARLIEST_MICROS = (EARLIEST - _EPOCH) // timedelta(microseconds=1)
_LATEST_MICROS = (LATEST - _EPOCH) // timedelta(microseconds=1)
_CONVERSION_ERRORS = (pa.ArrowException, OverflowError, UnicodeError, TypeError, ValueError)


class UnstorableValue(ValueError):
    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


def storable_column(values: list, type: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """`values` as an Arrow column of `type`, and {row: why} for the values it cannot store (null in the column)."""
    try:
        array = pa.array(values, type=type)
        problems: dict[int, str] = {}
    except _CONVERSION_ERRORS:
        array, problems = _value_by_value(values, type)
    problems.update(_out_of_range(array, values))
    return array, problems


def _value_by_value(values: list, type: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    problems = {}
    for row, value in enumerate(values):
        try:
            pa.array([value], type=type)
        except _CONVERSION_ERRORS as err:
            problems[row] = _conversion_reason(value, type, err)
    return pa.array([None if row in problems else v for row, v in enumerate(values)], type=type), problems


def _conversion_reason(value: Any, type: pa.DataType, err: Exception) -> str:
    if pa.types.is_integer(type) and isinstance(value, int):
        return f"integer {value} does not fit in 64 bits"
    if isinstance(value, str):
        return "text holds a lone surrogate (not encodable as UTF-8)"
    return f"{_shown(value)} cannot be stored as {type}: {type_name(err)}"


def _out_of_range(array: pa.Array, values: list) -> dict[int, str]:
    import pyarrow.compute as pc  # here: `import orchrm_dagster.contract` stays quick for commands that never ingest

    if pa.types.is_floating(array.type):
        return {row: f"{values[row]} is not a finite number" for row in _rows(pc.invert(pc.is_finite(array)))}
    if pa.types.is_timestamp(array.type):
        micros = array.cast(pa.int64())
        outside = pc.or_(pc.less(micros, _EARLIEST_MICROS), pc.greater(micros, _LATEST_MICROS))
        return {row: f"{_shown(values[row])} is outside years 1-9999 once normalised to UTC" for row in _rows(outside)}
    return {}


def _shown(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else safe_text(repr(value))[:60]


def _rows(mask: pa.Array) -> list[int]:
    import pyarrow.compute as pc

    return pc.indices_nonzero(mask.fill_null(False)).to_pylist()


def json_text(value: Any, field: str, default=None) -> str:
    """`value` as the JSON text a table keeps; raises UnstorableValue naming the first value out of range (its path
    below `field`; `field=""` names top-level keys bare)."""
    check_json(value, field)
    try:
        return orjson.dumps(value, default=default).decode()
    except TypeError as err:  # anything the walk above let through (a type only `default` knows)
        raise UnstorableValue(field, f"does not serialize to JSON: {err}") from None


def check_json(value: Any, field: str) -> None:
    """Raises UnstorableValue naming the first value of `value` out of range (its path below `field`)."""
    problem = _json_problem(value, field, 0)
    if problem:
        raise UnstorableValue(*problem)


def _json_problem(value: Any, path: str, depth: int) -> tuple[str, str] | None:
    if depth > MAX_JSON_DEPTH:
        return path, f"nested deeper than {MAX_JSON_DEPTH} levels"
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and not is_utf8(key):
                return safe_text(path), "a key holds a lone surrogate (not encodable as UTF-8)"
            problem = _json_problem(item, f"{path}.{key}" if path else str(key), depth + 1)
            if problem:
                return problem
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            problem = _json_problem(item, f"{path}[{index}]", depth + 1)
            if problem:
                return problem
    elif isinstance(value, bool) or value is None:
        return None
    elif isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            return safe_text(path), f"integer {value} does not fit in 64 bits"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return safe_text(path), f"{value} is not a finite number"
    elif isinstance(value, str):
        if not is_utf8(value):
            return safe_text(path), "text holds a lone surrogate (not encodable as UTF-8)"
    return None


def is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def safe_text(text: str) -> str:
    """`text` with any lone surrogate escaped, so that a reason or a field name can itself be stored."""
    return text if is_utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def type_name(err: Exception) -> str:
    return f"{type(err).__name__}: {safe_text(str(err))[:120]}"
