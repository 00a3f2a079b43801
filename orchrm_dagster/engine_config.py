"""One config per engine unit: a frozen pydantic dataclass, defined next to the code it configures.

Every field carries its default and a description (`Field(default=..., description=...)`). The Dagster layer does
not restate them: `assets/config_bridge.py` generates each launchpad `Config` / `ConfigurableResource`
from the engine class, so a field is written once. Instances are immutable and hashable (tuples, not lists),
validated on construction (a wrong type or an unknown field raises), and positional construction, `replace` and
`asdict` work as with any dataclass.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

__all__ = ["Field", "config_from_json", "config_to_json", "engine_config", "sections_config"]

_CONFIG = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def engine_config(cls):
    """Make `cls` an engine config: a frozen, validated pydantic dataclass."""
    return dataclass(frozen=True, config=_CONFIG)(cls)


def sections_config(class_name: str, doc: str, entries: dict, module: str) -> type:
    """An engine config with one field per registry entry, named after it: that entry's own settings section (its
    `config` class, with its defaults), described by the entry's `description`."""
    namespace = {"__module__": module, "__qualname__": class_name, "__doc__": doc,
                 "__annotations__": {name: entry.config for name, entry in entries.items()},
                 **{name: Field(default_factory=entry.config, description=entry.description)
                    for name, entry in entries.items()}}
    return engine_config(type(class_name, (), namespace))


def config_to_json(config) -> dict:
    """An engine config as JSON-able data (what `config_from_json` reads back): how a config crosses to a training
    process."""
    from pydantic import TypeAdapter

    return TypeAdapter(type(config)).dump_python(config, mode="json")


def config_from_json(cls: type, data: dict):
    from pydantic import TypeAdapter

    return TypeAdapter(cls).validate_python(data)
