"""The configuration reference, `docs/configuration.md`, generated from the config classes.

Every engine config (a pydantic dataclass made by `engine_config`), the registries' settings sections with them,
every config a CLI flag sets, and the Dagster layer's own configs (resources and check configs not generated from
an engine config) is written once with its fields: type, default and description, read from the same field
metadata the CLI's flags and the launchpad's run configs are generated from. The output is sorted and
holds no machine path, so the committed file changes only when a config does (tests/structure/test_config_reference.py
fails when it is stale).

    python -m orchrm_dagster.app.config_reference           # write docs/configuration.md
    python -m orchrm_dagster.app.config_reference --check   # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import pkgutil
import re
import sys
import types
import typing
from pathlib import Path

import annotated_types

import orchrm_dagster
from orchrm_dagster.registry import Registry

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
COMMAND = "python -m orchrm_dagster.app.config_reference"
_ABOVE_ENGINE = ("app", "definitions")  # not walked: the app's configs are found through the CLI's flags

_HEADER = f"""# Configuration reference

Generated from the config classes by `{COMMAND}`; do not edit by hand (a test fails when this file is stale).

Every config is a frozen pydantic dataclass written once, next to the code it configures. The launchpad's run configs
and resources, and the CLI's flags, are generated from the same fields. Where each config is set (run config, a
resource, a flag, an environment variable) is in [the settings guide](guide/settings.md).

How to read a type: `list of X` is a list in run config and a tuple in Python; `X or null` may be left unset; a
*registered name* is an entry of a registry, or a dotted path to one outside the package (`my_pkg.module:entry`, see
[extending](guide/extending.md)). A nested config's fields are listed under its own class.
"""


def config_classes() -> list[type]:
    """Every engine config class, every class nested in one, and every config a CLI flag sets; sorted by module and
    name."""
    found = set(_engine_configs()) | {config for config, _ in _flags()}
    for cls in list(found):
        found |= _nested_configs(cls)
    return sorted(found, key=_sort_key)


def dagster_configs() -> list[type]:
    """The Dagster layer's configs that are its own (not generated from an engine config), sorted."""
    import dagster as dg

    import assets
    from assets.config_bridge import EngineConfig, EngineResource

    found = set()
    for module in pkgutil.walk_packages(assets.__path__, "assets."):
        for value in vars(importlib.import_module(module.name)).values():
            if (isinstance(value, type) and issubclass(value, (dg.Config, dg.ConfigurableResource))
                    and value.__module__ == module.name and not issubclass(value, (EngineConfig, EngineResource))):
                found.add(value)
    return sorted(found, key=_sort_key)


def render() -> str:
    """The whole reference, as Markdown."""
    classes, own = config_classes(), dagster_configs()
    flags = _flags()
    used_in = _used_in(classes)
    parts = [_HEADER, _example_section(), _contents(classes, own)]
    parts += [_section(cls, used_in.get(cls, []), flags) for cls in classes]
    parts += [_DAGSTER_HEADER] + [_section(cls, [], flags) for cls in own]
    return "\n".join(parts)


def is_stale(path: Path = REFERENCE) -> bool:
    return not path.exists() or path.read_text() != render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = is_stale()
        print(f"docs/{REFERENCE.name} is {'stale: run `' + COMMAND + '`' if stale else 'up to date'}")
        return 1 if stale else 0
    REFERENCE.write_text(render())
    print(f"wrote {REFERENCE}")
    return 0


# --- finding the configs ---------------------------------------------------------------------------------------


def _engine_configs() -> set[type]:
    found = set()
    for module in pkgutil.walk_packages(orchrm_dagster.__path__, "orchrm_dagster."):
        if module.name.split(".")[1] in _ABOVE_ENGINE:
            continue
        found |= {value for value in vars(importlib.import_module(module.name)).values() if _is_config(value)}
    return found


def _is_config(value) -> bool:
    return isinstance(value, type) and dataclasses.is_dataclass(value) and hasattr(value, "__pydantic_fields__")


def _nested_configs(cls: type, seen: set[type] | None = None) -> set[type]:
    seen = set() if seen is None else seen
    for info in cls.__pydantic_fields__.values():
        for inner in _configs_in(info.annotation):
            if inner not in seen:
                seen.add(inner)
                _nested_configs(inner, seen)
    return seen


def _configs_in(annotation) -> list[type]:
    if _is_config(annotation):
        return [annotation]
    return [inner for arg in typing.get_args(annotation) for inner in _configs_in(arg)]


def _flags() -> dict[tuple[type, str], list[str]]:
    """(config class, field name) -> the `orchrm` flags that set it, read from the CLI's generated options."""
    from orchrm_dagster.app.cli import COMMANDS
    from orchrm_dagster.app.cli.options import ConfigOption

    found: dict[tuple[type, str], list[str]] = {}
    for name, (module, _) in sorted(COMMANDS.items()):
        command = importlib.import_module(f"orchrm_dagster.app.cli.{module}").command
        for param in command.params:
            if isinstance(param, ConfigOption):
                owner, field = _owner_of(param.config, param.path)
                found.setdefault((owner, field), []).append(f"orchrm {name} {max(param.opts, key=len)}")
    return found


def _owner_of(config: type, path: str) -> tuple[type, str]:
    """The class that holds the last field of `path` (dotted into nested configs), and that field's name."""
    *heads, last = path.split(".")
    for head in heads:
        config = _configs_in(config.__pydantic_fields__[head].annotation)[0]
    return config, last


def _used_in(classes: list[type]) -> dict[type, list[str]]:
    """Class -> the fields (`Parent.field`) that hold it."""
    used: dict[type, list[str]] = {}
    for parent in classes:
        for name, info in parent.__pydantic_fields__.items():
            for inner in _configs_in(info.annotation):
                used.setdefault(inner, []).append(f"[{parent.__name__}]({_anchor(parent)}).`{name}`")
    return {cls: sorted(set(places)) for cls, places in used.items()}


def _sort_key(cls: type) -> tuple[str, str]:
    return cls.__module__, cls.__qualname__


# --- the example settings file ----------------------------------------------------------------------------------

_EXAMPLE_HEADER = """## The settings file: a complete example

`orchrm.yaml` in the working directory (or the file `ORCHRM_CONFIG` or `orchrm --config FILE` names) sets every
setting below for the code location (the daemon, the UI, `dagster dev`, `dg`) and every `orchrm` command. Its
sections are the classes of this reference ([OrchrmSettings](#orchrmsettings)); a section or key left out keeps its
default, so a real file holds only what it changes. This example sets every key to its default (a test holds it
valid). Precedence: defaults < this file < ORCHRM_STORAGE / ORCHRM_DEPLOYMENT < a command's flags < a run's own
run config. `orchrm config show` prints what is in effect and where each value came from; `orchrm config check
FILE` validates a file. A backend (or any setting that takes one of several kinds) is written by its kind:
`backend: {openai: {base_url: ..., model: ...}}`. Relative paths are relative to the file's folder.
"""


def example_settings() -> str:
    """Every section of the settings file with every key at its default, each described in a comment."""
    from orchrm_dagster.settings import OrchrmSettings

    return "\n".join(_example_lines(OrchrmSettings, OrchrmSettings(), 0)) + "\n"


def _example_section() -> str:
    return _EXAMPLE_HEADER + "\n```yaml\n" + example_settings() + "```\n"


def _example_lines(cls: type, value, depth: int, first_prefix: str = "") -> list[str]:
    import json

    lines, pad = [], "  " * depth
    for index, (name, info) in enumerate(cls.__pydantic_fields__.items()):
        prefix = first_prefix if index == 0 else " " * len(first_prefix)
        item, comment = getattr(value, name), _short(info.description)
        head = f"{pad}{prefix}{name}:"
        if info.discriminator and dataclasses.is_dataclass(item):
            kind = getattr(item, info.discriminator)
            lines += [f"{head}  # {comment}", f"{pad}{' ' * len(prefix)}  {kind}:"]
            inner = [line for line in _example_lines(type(item), item, depth + 2) if
                     not line.lstrip().startswith(f"{info.discriminator}:")]
            lines += [" " * len(prefix) + line for line in inner]
        elif dataclasses.is_dataclass(item):
            inner = _example_lines(type(item), item, depth + 1)
            lines += [f"{head}  # {comment}"] + ([" " * len(prefix) + line for line in inner] if inner else [])
            if not inner:
                lines[-1] = f"{head} {{}}  # {comment}"
        elif isinstance(item, tuple) and item and dataclasses.is_dataclass(item[0]):
            lines.append(f"{head}  # {comment}")
            for element in item:
                lines += [" " * len(prefix) + line for line in _example_lines(type(element), element, depth + 1, "- ")]
        else:
            plain = list(item) if isinstance(item, tuple) else item
            lines.append(f"{head} {json.dumps(plain)}  # {comment}")
    return lines


def _short(description: str | None, limit: int = 90) -> str:
    text = " ".join((description or "").split()).rstrip(".")
    return text if len(text) <= limit else text[:limit - 3].rsplit(" ", 1)[0] + " ..."


# --- rendering -------------------------------------------------------------------------------------------------


_DAGSTER_HEADER = """# The Dagster layer's own configs

Resources and asset-check configs of `assets/` that no engine config generates.
"""


def _contents(classes: list[type], own: list[type]) -> str:
    lines = ["## Contents", ""]
    for unit, members in [*_by_unit(classes).items(), ("assets", own)]:
        lines.append(f"- `{unit}`: " + ", ".join(f"[{cls.__name__}]({_anchor(cls)})" for cls in members))
    return "\n".join(lines) + "\n"


def _by_unit(classes: list[type]) -> dict[str, list[type]]:
    units: dict[str, list[type]] = {}
    for cls in classes:
        units.setdefault(_unit(cls), []).append(cls)
    return units


def _unit(cls: type) -> str:
    return ".".join(cls.__module__.split(".")[:2])


def _section(cls: type, used_in: list[str], flags: dict) -> str:
    lines = [f"## {cls.__name__}", "", f"`{cls.__module__}.{cls.__qualname__}`", ""]
    if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):  # not dataclass's generated signature
        lines += [_one_line(cls.__doc__), ""]
    if used_in:
        lines += ["Used in: " + ", ".join(used_in) + ".", ""]
    fields = cls.__pydantic_fields__
    if not fields:
        return "\n".join(lines + ["No fields.", ""])
    lines += ["| field | type | default | description |", "|---|---|---|---|"]
    for name, info in fields.items():
        lines.append(f"| `{name}` | {_type(info.annotation, info.metadata)} | {_default(info)} | "
                     f"{_description(info, flags.get((cls, name), []))} |")
    return "\n".join(lines + [""])


def _description(info, flags: list[str]) -> str:
    text = _one_line(info.description or "").rstrip(".")
    registry = _registry(info.annotation, info.metadata)
    if registry is not None:
        text += f". Registered: {', '.join(f'`{name}`' for name in registry.names())}"
    if flags:
        text += ". Flag: " + ", ".join(f"`{flag}`" for flag in sorted(flags))
    return (text + ".") if text else ""


def _type(annotation, metadata=()) -> str:
    registry = _registry(annotation, metadata)
    bare = _unannotated(annotation)
    if registry is not None:
        kind = f"registered {registry.what}"
        return f"list of {kind} names" if typing.get_origin(bare) is tuple else f"{kind} name"
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    if origin in (typing.Union, types.UnionType):
        return _union(args, annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if origin in (tuple, list):
        return f"list of {_type(args[0])}"
    if origin is dict:
        return f"map of {_type(args[0])} to {_type(args[1])}"
    if _is_config(bare):
        return f"[{bare.__name__}]({_anchor(bare)})"
    if _engine_class_of(bare) is not None:
        return _type(_engine_class_of(bare))
    return _scalar(bare, [*metadata, *getattr(annotation, "__metadata__", ())])


def _union(args: tuple, annotation) -> str:
    members = [arg for arg in args if arg is not type(None)]
    if all(_is_config(member) for member in members) and len(members) > 1:  # told apart by a discriminator
        return "one of " + ", ".join(_type(member) for member in members)
    shown = " or ".join(_type(member) for member in members)
    return f"{shown} or null" if len(members) < len(args) else shown


def _scalar(annotation, metadata) -> str:
    name = getattr(annotation, "__name__", str(annotation))
    bounds = [f"{symbol} {_value(getattr(m, attr))}" for m in metadata
              for kind, attr, symbol in _BOUNDS if isinstance(m, kind)]
    return f"`{name}`" + (f" ({', '.join(bounds)})" if bounds else "")


_BOUNDS = ((annotated_types.Ge, "ge", "≥"), (annotated_types.Gt, "gt", ">"),
           (annotated_types.Le, "le", "≤"), (annotated_types.Lt, "lt", "<"))


def _engine_class_of(cls) -> type | None:
    """The engine config a Dagster config class was generated from, if it was."""
    from assets.config_bridge import generated_classes

    if not isinstance(cls, type):
        return None
    return next((engine for generated, engine in generated_classes().items() if issubclass(cls, generated)), None)


def _registry(annotation, metadata) -> Registry | None:
    """The registry a field's names resolve in (its type is `Registry.name_type` / `names_type`), as the CLI finds
    it for its choices."""
    validators = [*metadata, *getattr(annotation, "__metadata__", ())]
    for item in validators:
        owner = getattr(getattr(item, "func", None), "__self__", None)
        if isinstance(owner, Registry):
            return owner
    return None


def _unannotated(annotation):
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _default(info) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if dataclasses.is_dataclass(value):
        return _config_default(value)
    registry = _registry(info.annotation, info.metadata)
    if registry is not None and isinstance(value, tuple) and value and value == registry.names():
        return "every registered one"
    return f"`{_value(value)}`"


def _config_default(value) -> str:
    """A nested config's default: its class's defaults, or the fields where it differs from them."""
    changed = _changes(value)
    if not changed:
        return "its defaults"
    return "its defaults, but `{" + ", ".join(f"{path}: {shown}" for path, shown in changed) + "}`"


def _changes(value, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted path, value) of every field where `value` differs from its class's defaults, nested ones included."""
    try:
        own = type(value)()
    except (TypeError, ValueError):  # a class with required fields: every field is shown
        own = None
    changed = []
    for field in dataclasses.fields(value):
        item, default = getattr(value, field.name), getattr(own, field.name, None)
        if own is not None and item == default:
            continue
        if own is not None and dataclasses.is_dataclass(item) and type(item) is type(default):
            changed += _changes(item, f"{prefix}{field.name}.")
        else:
            changed.append((f"{prefix}{field.name}", _value(item)))
    return changed


def _value(value) -> str:
    """A value as run config (YAML) writes it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_value(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_value(item)}" for key, item in sorted(value.items())) + "}"
    if dataclasses.is_dataclass(value):
        return "{" + ", ".join(f"{f.name}: {_value(getattr(value, f.name))}" for f in dataclasses.fields(value)) + "}"
    if isinstance(value, Path):
        return value.as_posix()
    return str(value)


def _one_line(text: str) -> str:
    """Text on one table line: whitespace collapsed, pipes escaped."""
    return re.sub(r"\s+", " ", text).strip().replace("|", "\\|")


def _anchor(cls: type) -> str:
    """GitHub's anchor of a `## ClassName` heading."""
    return "#" + cls.__name__.lower()


if __name__ == "__main__":
    sys.exit(main())
