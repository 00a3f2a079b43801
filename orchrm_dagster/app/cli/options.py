"""Click options generated from engine-config fields: a flag's type, default, help and choices are the field's own,
written once in the config (as TRL's parser builds its CLI from its config dataclasses). A new config field is one
more `config_options` path; a new registry entry reaches every flag that names one with no CLI edit.

A flag left out is None, so the settings a command starts from (a resource's, a config file's) keep their value:
`apply_options(settings, ctx)` replaces only what was given, along each option's path into nested configs."""

from __future__ import annotations

import dataclasses
import types
import typing

import annotated_types
import click

from orchrm_dagster.registry import Registry


class ListOf(click.ParamType):
    """Comma-separated values of one type: `1,2,4,8`, `orchrm,trajectory`."""

    def __init__(self, item: click.ParamType):
        self.item = item
        self.name = f"{item.name} list"

    def get_metavar(self, param, ctx=None) -> str:
        return f"{_metavar(self.item, param, ctx)}[,...]"

    def convert(self, value, param, ctx):
        if isinstance(value, tuple):
            return value
        values = tuple(self.item.convert(part.strip(), param, ctx) for part in str(value).split(",") if part.strip())
        if not values:
            self.fail(f"{value!r}: one value at least, comma-separated", param, ctx)
        return values


class RegistryName(click.ParamType):
    """A name a registry holds, or a dotted import path to an entry outside the package (my_pkg.module:entry). The
    registry is read when the flag is used or its help shown, not when the CLI is imported."""

    name = "name"

    def __init__(self, registry: Registry):
        self.registry = registry

    def names(self) -> tuple[str, ...]:
        return self.registry.names()

    def get_metavar(self, param, ctx=None) -> str:
        choices = "|".join(self.names())
        return f"[{choices}]" if len(choices) <= 40 else "NAME"

    def convert(self, value, param, ctx):
        try:
            self.registry.named(value)
        except ValueError as err:
            self.fail(str(err), param, ctx)
        return value


class ConfigOption(click.Option):
    """A flag for one field of an engine config, at `path` (dotted into nested configs); its help is the field's
    description (a registry-named field's lists the registry's entries: `Registry.described`) and its default."""

    def __init__(self, *args, config: type, path: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.config, self.path = config, path


def config_options(config: type, *paths: str, flags: dict[str, str] | None = None, defaults_from: str = "",
                   shown: dict[str, str] | None = None):
    """A decorator adding one `ConfigOption` per field path of `config`, in the order given; `flags` renames a
    path's flag (default: --the-last-part); `defaults_from` says where the effective default comes from when it is
    not the config's own (shown in each help); `shown` replaces a path's shown default where the
    command gives the flag a meaning of its own (`--best-of N` turns Best-of-N on)."""

    def decorate(command):
        for path in reversed(paths):
            command = _option(config, path, (flags or {}).get(path), defaults_from, (shown or {}).get(path))(command)
        return command

    return decorate


def given(ctx: click.Context, config: type) -> dict[str, object]:
    """Path -> value of every flag of `config` the user gave (a list flag given several times: every value)."""
    found = {}
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if isinstance(param, ConfigOption) and param.config is config and value not in (None, ()):
            found[param.path] = tuple(v for part in value for v in part) if param.multiple else value
    return found


def apply_options(settings, ctx: click.Context, **more):
    """`settings` with every flag of its config that was given (and `more`: path -> value), all at once; the config's
    own check refusing a value or a combination is a usage error."""
    try:
        return _replace(settings, {**given(ctx, type(settings)), **more})
    except ValueError as err:  # pydantic's ValidationError too
        raise click.BadParameter(str(err)) from err


def field_info(config: type, path: str):
    """The pydantic FieldInfo at `path` of `config`."""
    cls, info = config, None
    for part in path.split("."):
        info = cls.__pydantic_fields__[part]
        cls = info.annotation
    return info


def field_default(config: type, path: str):
    return field_info(config, path).get_default(call_default_factory=True)


def _option(config: type, path: str, flag: str | None, defaults_from: str, shown_default: str | None):
    info = field_info(config, path)
    default = info.get_default(call_default_factory=True)
    flag = flag or "--" + path.rsplit(".", 1)[-1].replace("_", "-")
    name = flag.removeprefix("--").replace("-", "_")
    kind = _param_type(info.annotation, info.metadata)
    shown = shown_default or _shown(default, _registry_of(kind)) + (f" (or {defaults_from}'s)" if defaults_from else "")
    help_text = (info.description or "").rstrip(".") + f".  [default: {shown}]"
    if kind is bool:
        return click.option(f"{flag}/--no-{flag.removeprefix('--')}", name, cls=ConfigOption, config=config,
                            path=path, default=None, help=help_text)
    listed = isinstance(kind, ListOf)  # repeatable, each occurrence comma-separated: --policy a --policy b,c
    return click.option(flag, name, cls=ConfigOption, config=config, path=path, type=kind, default=None,
                        multiple=listed, help=help_text)


def _param_type(annotation, metadata) -> click.ParamType | type:
    registry = next((getattr(m.func, "__self__", None) for m in _validators(annotation, metadata)
                     if isinstance(getattr(m.func, "__self__", None), Registry)), None)
    annotation = _without_none(_unannotated(annotation))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if registry is not None:
        return ListOf(RegistryName(registry)) if origin is tuple else RegistryName(registry)
    if origin is tuple:
        return ListOf(_scalar(args[0], ()))
    return _scalar(annotation, metadata)


def _scalar(annotation, metadata) -> click.ParamType | type:
    if typing.get_origin(annotation) is typing.Literal:
        return click.Choice([str(a) for a in typing.get_args(annotation)])
    if annotation is bool:
        return bool
    low = next((m.ge for m in metadata if isinstance(m, annotated_types.Ge)), None)
    above = next((m.gt for m in metadata if isinstance(m, annotated_types.Gt)), None)
    if annotation is int:
        return click.IntRange(min=low if above is None else above + 1) if (low, above) != (None, None) else click.INT
    if annotation is float:
        return (click.FloatRange(min=low if above is None else above, min_open=above is not None)
                if (low, above) != (None, None) else click.FLOAT)
    return click.STRING


def _validators(annotation, metadata):
    from pydantic import AfterValidator

    found = list(metadata) + list(getattr(annotation, "__metadata__", ()))
    return [m for m in found if isinstance(m, AfterValidator)]


def _unannotated(annotation):
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _without_none(annotation):
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unannotated(rest[0]) if len(rest) == 1 else annotation
    return annotation


def _registry_of(kind) -> Registry | None:
    kind = kind.item if isinstance(kind, ListOf) else kind
    return kind.registry if isinstance(kind, RegistryName) else None


def _metavar(kind, param, ctx) -> str:
    return kind.get_metavar(param, ctx) or kind.name.upper()


def _shown(default, registry: Registry | None = None) -> str:
    if registry is not None and isinstance(default, tuple) and default == registry.names():
        return "every registered one"
    if default is None:
        return "none"
    if isinstance(default, tuple):
        return ",".join(map(str, default)) or "every one"
    return str(default)


def _replace(settings, changes: dict[str, object]):
    """`settings` with each dotted path of `changes` replaced; a nested config is rebuilt once, with all of its
    changes (its own check sees them together)."""
    direct, nested = {}, {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    direct.update({head: _replace(getattr(settings, head), inner) for head, inner in nested.items()})
    return dataclasses.replace(settings, **direct) if direct else settings
