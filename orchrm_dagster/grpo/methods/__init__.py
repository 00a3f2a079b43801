"""The registry of policy-round training methods: the ways a round turns its starting policy into a new one.

Each method is a module of this package that registers a `TrainingMethod` when it is imported; the first read of the
registry imports every module here. `GRPOSettings.method` (its choices and its per-method settings sections), the
CLI's `--method`, the round and the bench read the registry, so a new method is one new module (and its test). The
round around a method is one path for all of them: starting policy, held-out measure, gate, publishing, rollout.
"""

from __future__ import annotations

from orchrm_dagster.grpo.methods.base import MethodContext, TrainingMethod, fine_tune, method_prompts
from orchrm_dagster.registry import Registry

__all__ = ["METHODS", "MethodContext", "TrainingMethod", "fine_tune", "method_named", "method_names",
           "method_prompts", "register_method", "registered_methods"]

METHODS: Registry[TrainingMethod] = Registry("policy training method", __name__, group="orchrm.training_methods",
                                             skip=("base",), entry_type=TrainingMethod)
register_method = METHODS.register
registered_methods = METHODS.all
method_names = METHODS.names
method_named = METHODS.named
