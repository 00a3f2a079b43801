"""What a truth function is: its registry entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from orchrm_dagster.plans import Plan


@dataclass(frozen=True)
class TruthFunction:
    name: str  # what `SimulatedSettings.truth` calls it; also its parameter section's name
    description: str  # one line: the config's and the CLI's help
    config: type  # an @engine_config class: the function's parameters, with defaults
    probability: Callable[[object, Plan], float]  # (its config, a parsed plan) -> chance of a correct answer

    def chance(self, config, plan: Plan) -> float:
        """`probability`, checked: a truth outside [0, 1] is a bug of its module, named here."""
        value = float(self.probability(config, plan))
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"truth function {self.name!r} gave {value} for a plan: not a probability")
        return value
