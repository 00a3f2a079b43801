"""A fast decoder for the common record: msgspec types generated from the contract's pydantic models.

The pydantic models (`contract.record`) are the contract; this module writes no rule of its own. It derives one
msgspec Struct per model, field by field (types, required fields, `min_length` and `ge` constraints), and forbids
unknown fields, so that everything unusual is declined: a line it cannot decode, one with an unknown field, one
that breaks any rule. Fields of a type it does not translate (timestamps, free-form objects) are kept as raw JSON
and validated by pydantic itself, with the model's own annotation. Whatever this decoder accepts, pydantic accepts
with the same values (tests/test_fast_decode.py checks that property); what it declines goes to pydantic, which
also words the error.

Why not pydantic for every line: its validation was as much CPU as DuckDB's whole JSON parse and Parquet write
(bench/ingest_label.py --compare), and msgspec decodes the same records several times faster.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union

import annotated_types
import msgspec
from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic.fields import FieldInfo

from orchrm_dagster.contract.record import RunRecord

_PLAIN = (str, int, float, bool)
# pydantic's JSON parser refuses a document nested deeper than 200 levels, even in a value a duplicate key replaces;
# msgspec has no such limit. A line with fewer opening brackets than that cannot nest so deep.
_NESTING_LIMIT = 200
_STRICT = ConfigDict(strict=True)


def _constraint(item: Any) -> dict[str, Any] | None:
    """A pydantic field constraint as msgspec Meta arguments; None for one it has no match for."""
    if isinstance(item, annotated_types.MinLen):
        return {"min_length": item.min_length}
    if isinstance(item, annotated_types.Ge):
        return {"ge": item.ge}
    return None


class _Builder:
    def __init__(self) -> None:
        self.structs: dict[type[BaseModel], type[msgspec.Struct]] = {}
        self.raw_fields: dict[type[msgspec.Struct], list[tuple[str, TypeAdapter]]] = {}
        self.nested: dict[type[msgspec.Struct], list[str]] = {}  # fields holding structs that have raw fields

    def struct(self, model: type[BaseModel]) -> type[msgspec.Struct]:
        if model in self.structs:
            return self.structs[model]
        fields, raw, nested = [], [], []
        for name, info in model.model_fields.items():
            translated = self.field_type(info)
            if translated is None:  # pydantic validates it, from its raw JSON
                annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
                raw.append((name, TypeAdapter(annotation, config=_STRICT)))
                translated = msgspec.Raw
            elif self._holds_raw(info.annotation):
                nested.append(name)
            fields.append((name, translated) if info.is_required() else (name, translated, info.default))
        struct = msgspec.defstruct(
            f"Fast{model.__name__}", fields, kw_only=True, forbid_unknown_fields=True,
            namespace={"model_extra": None})  # no unknown fields: what run_row reads of a pydantic record
        self.structs[model], self.raw_fields[struct], self.nested[struct] = struct, raw, nested
        return struct

    def field_type(self, info: FieldInfo) -> Any:
        constraints = [_constraint(item) for item in info.metadata]
        if any(c is None for c in constraints):
            return None
        translated = self.translate(info.annotation)
        if translated is None or not constraints:
            return translated
        meta = msgspec.Meta(**{k: v for c in constraints for k, v in c.items()})
        if _is_optional(info.annotation):
            inner = [a for a in typing.get_args(translated) if a is not type(None)]
            return Union[Annotated[inner[0], meta], None] if len(inner) == 1 else None
        return Annotated[translated, meta]

    def translate(self, annotation: Any) -> Any:
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if annotation in _PLAIN or annotation is type(None):
            return annotation
        if origin is Literal and all(isinstance(a, str) for a in args):
            return annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return self.struct(annotation)
        if origin in (Union, types.UnionType):
            parts = [self.translate(a) for a in args]
            return None if any(p is None for p in parts) or len(args) != 2 or type(None) not in args else \
                Union[tuple(parts)]
        if origin is list and len(args) == 1:
            item = self.translate(args[0])
            return None if item is None else list[item]
        return None  # datetime, dict[str, Any], anything else: pydantic's own validation

    def _holds_raw(self, annotation: Any) -> bool:
        for arg in (annotation, *typing.get_args(annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                struct = self.structs[arg]
                if self.raw_fields[struct] or self.nested[struct]:
                    return True
            elif typing.get_origin(arg) is list and self._holds_raw(typing.get_args(arg)[0]):
                return True
        return False


def _is_optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in typing.get_args(annotation)


_BUILDER = _Builder()
FastRunRecord = _BUILDER.struct(RunRecord)
_DECODER = msgspec.json.Decoder(FastRunRecord)


def fast_record(data: bytes | str) -> Any | None:
    """The record of a JSON line, attribute for attribute what `RunRecord.model_validate_json` gives; None when
    this decoder declines the line (pydantic then decides, and words any error)."""
    square, curly = (b"[", b"{") if isinstance(data, bytes) else ("[", "{")
    if data.count(square) + data.count(curly) >= _NESTING_LIMIT:  # may nest deeper than pydantic's parser allows
        return None
    try:
        record = _DECODER.decode(data)
        _resolve_raw(record)
    except (msgspec.DecodeError, ValueError):  # ValueError: pydantic's ValidationError on a raw field
        return None
    return record


def _resolve_raw(struct: msgspec.Struct) -> None:
    for name, adapter in _BUILDER.raw_fields[type(struct)]:
        value = getattr(struct, name)
        if isinstance(value, msgspec.Raw):
            setattr(struct, name, adapter.validate_json(bytes(value)))
    for name in _BUILDER.nested[type(struct)]:
        value = getattr(struct, name)
        for item in value if isinstance(value, list) else () if value is None else (value,):
            _resolve_raw(item)


__all__ = ["FastRunRecord", "fast_record"]
