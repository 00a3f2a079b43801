"""Truth functions, a registry: the chance that executing a parsed plan answers correctly, where a simulated
environment (`orchrm_dagster.environments`, `simulated`) decides correctness instead of real sub-agents.

Each function is a module of this package that registers a `TruthFunction` when imported: its name, a description,
its `@engine_config` parameters and `probability(config, plan) -> float in [0, 1]`. `SimulatedSettings.truth` (its
choices and its per-function parameter sections), the CLI and the bench read the registry, so a new truth is one new
module plus its test. The generated history batches (`orchrm_dagster.synthetic`) draw their correctness from the
same `plan_success_rate`, so a reward model trained on them learns what the simulated environment rewards.
"""

from __future__ import annotations

from orchrm_dagster.registry import Registry
from orchrm_dagster.truths.base import TruthFunction

__all__ = ["TRUTHS", "TruthFunction", "register_truth", "truth_named", "truth_names", "truths"]

TRUTHS: Registry[TruthFunction] = Registry("truth function", __name__, group="orchrm.truths", skip=("base",),
                                            entry_type=TruthFunction)
register_truth = TRUTHS.register
truths = TRUTHS.all
truth_names = TRUTHS.names
truth_named = TRUTHS.named
