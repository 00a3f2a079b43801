"""The project's DuckDB SQL, one query per file, loaded by name.

Queries take values as DuckDB named parameters (`$batch_id`, bound at execute time). DDL and COPY
cannot bind parameters: their files use `$name` placeholders filled by `load(name, **values)`, inserted
as given, so quote values with `literal` / `identifier`. Without values the text is returned unchanged.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files
from string import Template


@cache
def _text(name: str) -> str:
    resource = files(__name__) / f"{name}.sql"
    if not resource.is_file():
        raise FileNotFoundError(f"no SQL file named {name!r} in the sql/ package")
    return resource.read_text()


def load(name: str, **values: str) -> str:
    return Template(_text(name)).substitute(values) if values else _text(name)


def literal(value: str) -> str:
    """A SQL string literal."""
    return "'" + value.replace("'", "''") + "'"


def list_literal(values) -> str:
    """A SQL list of string literals: ['a', 'b']."""
    return "[" + ", ".join(literal(v) for v in values) + "]"


def identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
