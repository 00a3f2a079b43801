"""A fast decoder for the common record: msgspec types generated from the contract's pydantic models.

The pydantic models (`contract.record`) are the contract; this module writes no rule of its own. It derives one
msgspec Struct per model, field by field (types, required fields, `min_length` and `ge` constraints), and forbids
unknown fields, so that everything unusual is declined: a line it cannot decode, one with an unknown field, one
that breaks any rule. Timestamps are read as JSON strings and parsed by pydantic; fields of a type it does not
translate (free-form objects) are kept as raw JSON and validated by pydantic; both with the model's own annotation.
Whatever this decoder accepts, pydantic accepts with the same values (tests/ingest/test_fast_decode.py checks that
property); what it declines goes to pydantic, which also words the error.

Why not pydantic for every line: its validation was as much CPU as DuckDB's whole JSON parse and Parquet write
(bench/ingest_label.py --compare), and msgspec decodes the same records several times faster.
"""

from __future__ import annotations

import types
import typing
from datetime import datetime
from typing import Annotated, Any, Literal, Union

import annotated_types
import msgspec
from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic.fields import FieldInfo

from orchrm_dagster.contract.record import RunRecord

_PLAIN = (str, int, float, bool)
_PARSED_FROM_TEXT = (datetime,)  # msgspec reads a JSON string, pydantic parses it (validate_strings: as from JSON)
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
        # per struct: (field, adapter, from raw JSON?) for the fields pydantic validates after msgspec decoded them
        self.checked: dict[type[msgspec.Struct], list[tuple[str, TypeAdapter, bool]]] = {}
        self.nested: dict[type[msgspec.Struct], list[str]] = {}  # fields holding structs that have checked fields

    def struct(self, model: type[BaseModel]) -> type[msgspec.Struct]:
        if model in self.structs:
            return self.structs[model]
        fields, checked, nested = [], [], []
        for name, info in model.model_fields.items():
            translated = self.field_type(info)
            if translated is None or _text_parsed(info):  # pydantic validates it, from its JSON or its text
                annotation = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
                checked.append((name, TypeAdapter(annotation, config=_STRICT), translated is None))
                translated = msgspec.Raw if translated is None else translated
            elif self._holds_checked(info.annotation):
                nested.append(name)
            fields.append((name, translated) if info.is_required() else (name, translated, info.default))
        struct = msgspec.defstruct(
            f"Fast{model.__name__}", fields, kw_only=True, forbid_unknown_fields=True,
            namespace={"model_extra": None})  # no unknown fields: what run_row reads of a pydantic record
        self.structs[model], self.checked[struct], self.nested[struct] = struct, checked, nested
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
        if annotation in _PARSED_FROM_TEXT:
            return str
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
        return None  # dict[str, Any], anything else: pydantic validates its raw JSON

    def _holds_checked(self, annotation: Any) -> bool:
        for arg in (annotation, *typing.get_args(annotation)):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                struct = self.structs[arg]
                if self.checked[struct] or self.nested[struct]:
                    return True
            elif typing.get_origin(arg) is list and self._holds_checked(typing.get_args(arg)[0]):
                return True
        return False


def _text_parsed(info: FieldInfo) -> bool:
    return any(arg in _PARSED_FROM_TEXT for arg in (info.annotation, *typing.get_args(info.annotation)))


def _is_optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in typing.get_args(annotation)


_BUILDER = _Builder()
FastRunRecord = _BUILDER.struct(RunRecord)
_DECODER = msgspec.json.Decoder(FastRunRecord)


def fast_record(data: bytes | str) -> Any | None:
    """The record of a JSON line, attribute for attribute what `RunRecord.model_validate_json` gives; None when
    this decoder declines the line (pydantic then decides, and words any error)."""
    try:
        record = _DECODER.decode(data)
        held_raw_json = _check(record)
    # ValueError: pydantic's ValidationError on a checked field; RecursionError: msgspec on a very deep document
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None
    if held_raw_json and _may_nest_too_deep(data):
        return None
    return record


def _check(struct: msgspec.Struct) -> bool:
    """Validate (and replace) the struct's checked fields with pydantic; True when one held raw JSON."""
    held_raw_json = False
    for name, adapter, from_json in _BUILDER.checked[type(struct)]:
        value = getattr(struct, name)
        if from_json and isinstance(value, msgspec.Raw):
            setattr(struct, name, adapter.validate_json(bytes(value)))
            held_raw_json = True
        elif not from_json and value is not None:
            setattr(struct, name, adapter.validate_strings(value))
    for name in _BUILDER.nested[type(struct)]:
        value = getattr(struct, name)
        for item in value if isinstance(value, list) else () if value is None else (value,):
            held_raw_json |= _check(item)
    return held_raw_json


def _may_nest_too_deep(data: bytes | str) -> bool:
    """pydantic's JSON parser refuses a document nested deeper than 200 levels, even in a value a duplicate key
    replaces; msgspec has no such limit. Only a raw JSON field can nest that deep (every other field has a fixed
    shape, and a duplicate key's earlier value must have it too), and a line with fewer opening brackets than that
    cannot."""
    square, curly = (b"[", b"{") if isinstance(data, bytes) else ("[", "{")
    return data.count(square) + data.count(curly) >= _NESTING_LIMIT


__all__ = ["FastRunRecord", "fast_record"]
