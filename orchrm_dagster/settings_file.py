"""The settings file, read: `orchrm.yaml` in the working directory, or the file ORCHRM_CONFIG names.

Light on purpose (YAML and pydantic, no config class): `storage.default_storage_url` reads the file's storage root
through it in commands that must answer in well under a second. `orchrm_dagster.settings` holds the whole file's
schema and the precedence of its values.

A value's place in the file is kept (`SettingsFile.line_of`), so a mistake is named by file, line and key, with the
nearest known key or the bound it breaks. Relative paths in the file's path fields are relative to the file's folder
(as `workspace.yaml`'s are), so the daemon, the UI and a command run elsewhere read the same files.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from pathlib import Path

import yaml

SETTINGS_ENV = "ORCHRM_CONFIG"
FILE_NAME = "orchrm.yaml"

Loc = tuple[typing.Union[str, int], ...]

# (section, ..., field) of the fields holding a path; "*": every item of a list, or every value of a mapping (a
# backend written as a selector: `backend: {transformers: {model: ...}}`)
_PATH_FIELDS: tuple[Loc, ...] = (
    ("storage", "root"), ("storage", "warehouse_path"), ("problems", "extra_files", "*"),
    ("policies", "*", "prompt"), ("policies", "*", "model"), ("policies", "*", "checkpoint_path"),
    ("llm", "backend", "*", "model"), ("llm", "backend", "model"), ("pairs", "import_files", "*"),
    ("execution", "corpus"), ("loop", "rollout_execution", "corpus"), ("loop", "round", "execution", "corpus"),
    ("loop", "reward_model", "backbone"), ("serving", "token_file"))


class SettingsError(ValueError):
    """The settings file cannot be read or breaks its schema: the message names the file, the line and the key."""


@dataclasses.dataclass(frozen=True)
class SettingsFile:
    """The file's values (plain YAML data, paths resolved) and the line of each key; an absent file holds none."""

    path: Path | None
    data: dict
    lines: dict[Loc, int]

    def line_of(self, loc: Loc) -> int | None:
        """The line of `loc`'s key, or of the nearest enclosing key the file has."""
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return None

    def where(self, loc: Loc) -> str:
        line = self.line_of(loc)
        return f"{self.path}:{line}" if line else str(self.path)

    def given(self, loc: Loc) -> bool:
        return loc in self.lines

    def section(self, name: str) -> dict:
        value = self.data.get(name)
        return value if isinstance(value, dict) else {}


NO_FILE = SettingsFile(None, {}, {})


def settings_path() -> Path | None:
    """The settings file in effect: ORCHRM_CONFIG's (which must exist), else ./orchrm.yaml when there is one."""
    named = os.environ.get(SETTINGS_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise SettingsError(f"{SETTINGS_ENV}={named}: no such settings file")
        return path.resolve()
    here = Path(FILE_NAME)
    return here.resolve() if here.is_file() else None


_READ: dict[tuple, SettingsFile] = {}


def read_settings_file(path: Path | None = None) -> SettingsFile:
    """The settings file (`path`, else `settings_path()`), parsed; read again only when it changed."""
    path = path.resolve() if path is not None else settings_path()
    if path is None:
        return NO_FILE
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        _READ.clear()
        _READ[key] = _parse(path)
    return _READ[key]


def _parse(path: Path) -> SettingsFile:
    text = path.read_text(encoding="utf-8")
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SettingsError(f"{where}: not valid YAML: {getattr(err, 'problem', None) or err}") from None
    if data is None:
        return SettingsFile(path, {}, {})
    if not isinstance(data, dict):
        raise SettingsError(f"{path}:1: the settings file holds sections by name (storage:, loop:, ...), "
                            f"not a {type(data).__name__}")
    lines: dict[Loc, int] = {}
    _key_lines(node, (), lines, path)
    return SettingsFile(path, _with_resolved_paths(data, path.parent), lines)


def _key_lines(node, loc: Loc, lines: dict[Loc, int], path: Path) -> None:
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise SettingsError(f"{path}:{key_node.start_mark.line + 1}: {_dotted(loc + (key,))} is given twice")
            seen.add(key)
            lines[loc + (key,)] = key_node.start_mark.line + 1
            _key_lines(value_node, loc + (key,), lines, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            lines[loc + (index,)] = item.start_mark.line + 1
            _key_lines(item, loc + (index,), lines, path)


def _with_resolved_paths(data: dict, folder: Path) -> dict:
    for pattern in _PATH_FIELDS:
        _resolve(data, pattern, folder)
    return data


def _resolve(value, pattern: Loc, folder: Path) -> None:
    head, rest = pattern[0], pattern[1:]
    if head == "*":
        keys = range(len(value)) if isinstance(value, list) else list(value) if isinstance(value, dict) else []
    else:
        keys = [head] if isinstance(value, dict) and head in value else []
    for key in keys:
        if rest:
            _resolve(value[key], rest, folder)
        elif isinstance(value[key], str) and _is_relative_path(value[key], pattern[-1], folder):
            value[key] = str((folder / value[key]).resolve())


def _is_relative_path(text: str, field: str, folder: Path) -> bool:
    if "://" in text or Path(text).expanduser().is_absolute():
        return False
    if field in ("prompt", "corpus"):  # one shipped in the package is named without a folder or suffix
        return "/" in text or Path(text).suffix != ""
    if field in ("model", "backbone"):  # a hub id (org/name) is not a path unless written as one or found there
        return text.startswith(("./", "../")) or (folder / text).exists()
    return True


def _dotted(loc: Loc) -> str:
    return ".".join(str(part) for part in loc)


def validated(cls: type, data, file: SettingsFile, loc: Loc = ()):
    """`data` (the file's values at `loc`) as a `cls` instance; a SettingsError naming each mistake's file, line and
    key (with the nearest known key, or the bound a value breaks) when it is not one."""
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(cls).validate_python(data)
    except ValidationError as err:
        mistakes = [text for _, text in sorted(_mistake(cls, error, file, loc) for error in err.errors())]
        raise SettingsError(f"{file.path or 'the settings'} is not valid ({len(mistakes)} mistake"
                            f"{'s' if len(mistakes) > 1 else ''}):\n" + "\n".join(mistakes)) from None


def _mistake(cls: type, error: dict, file: SettingsFile, prefix: Loc) -> tuple[int, str]:
    """(line, what is wrong there)."""
    loc = tuple(error["loc"])
    full = prefix + _file_loc(cls, loc)
    if error["type"] == "union_tag_invalid":  # the kind written as a selector's key has a line of its own
        tag = (error.get("ctx") or {}).get("tag")
        full += (tag,) if file.given(full + (tag,)) else ()
    return file.line_of(full) or 0, _said(cls, error, file, loc, full)


def _said(cls: type, error: dict, file: SettingsFile, loc: Loc, full: Loc) -> str:
    where = file.where(full) if file.path else "settings"
    if error["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        known = field_names(class_at(cls, loc[:-1]))
        near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.5)
        hint = f"did you mean {near[0]}?" if near else f"known keys: {', '.join(known)}"
        return f"  {where}: {_dotted(full)}: unknown key ({hint})"
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "union_tag_invalid":
        ctx = error.get("ctx") or {}
        kinds = [kind.strip(" '") for kind in str(ctx.get("expected_tags", "")).split(",")]
        near = difflib.get_close_matches(str(ctx.get("tag")), kinds, n=1, cutoff=0.5)
        message = f"unknown kind {ctx.get('tag')!r} ({f'did you mean {near[0]}?' if near else 'known: ' + ', '.join(kinds)})"
    got = "" if error["type"] in ("missing", "union_tag_invalid") or isinstance(error.get("input"), dict) else (
        f" (got {error.get('input')!r})")
    return f"  {where}: {_dotted(full) or '(top level)'}: {message}{got}"


def _file_loc(cls: type, loc: Loc) -> Loc:
    """`loc` as the file writes it: a discriminated union's tag is a key of the file's own (`backend: {openai:
    ...}`) as pydantic's location has it, so nothing changes but the tag a dataclass call adds."""
    return tuple(part for part in loc if part != "function-after[__post_init__(), dataclass]")


def field_names(cls: type | None) -> list[str]:
    fields = getattr(cls, "__pydantic_fields__", None) or {}
    return list(fields)


def class_at(cls: type, loc: Loc) -> type | None:
    """The config class of the value at `loc` inside a `cls` (None where it is not a config)."""
    for part in loc:
        cls = _plain(cls)
        fields = getattr(cls, "__pydantic_fields__", None)
        if fields is not None:
            if part not in fields:
                return None
            cls = fields[part].annotation
            continue
        origin, args = typing.get_origin(cls), typing.get_args(cls)
        if origin in (tuple, list):
            cls = args[0]
        elif origin is dict:
            cls = args[1]
        elif origin in (typing.Union, types.UnionType):
            cls = next((member for member in args if _kind_of(member) == part), None)
            if cls is None:
                return None
        else:
            return None
    return _plain(cls)


def _kind_of(member) -> str | None:
    fields = getattr(member, "__pydantic_fields__", None) or {}
    return fields["kind"].default if "kind" in fields else None


def _plain(annotation):
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return _plain(rest[0])
    return annotation
