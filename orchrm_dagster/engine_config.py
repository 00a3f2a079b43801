"""One config per engine unit: a frozen pydantic dataclass, defined next to the code it configures.

Every field carries its default and a description (`Field(default=..., description=...)`). The Dagster layer does
not restate them: `orchrm_dagster.glue.config_bridge` generates each launchpad `Config` / `ConfigurableResource`
from the engine class, so a field is written once. Instances are immutable and hashable (tuples, not lists),
validated on construction (a wrong type or an unknown field raises), and positional construction, `replace` and
`asdict` work as with any dataclass.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

__all__ = ["Field", "engine_config"]

_CONFIG = ConfigDict(extra="forbid", arbitrary_types_allowed=False)


def engine_config(cls):
    """Make `cls` an engine config: a frozen, validated pydantic dataclass."""
    return dataclass(frozen=True, config=_CONFIG)(cls)
