"""The registry of Best-of-N evaluation methods: the ways of choosing among N candidate runs.

Each method is a module of this package that registers an `EvaluationMethod` when it is imported; the first read of
the registry imports every module here. The settings' validation, the CLI's `--methods`, the `evaluation` asset and
`evaluate` read the registry, so a new method is one new module (and its test). What several methods compute alike
(a ranked choice, the candidate sets, per-problem means, a judge's picks) is in `common`.
"""

from orchrm_dagster.evaluation.method import (METHODS, EvaluationMethod, MethodKind, Preparation, method_named,
                                             method_names, prepare_pool, register_method, registered_methods,
                                             timed_into)

__all__ = ["METHODS", "EvaluationMethod", "MethodKind", "Preparation", "method_named", "method_names",
           "prepare_pool", "register_method", "registered_methods", "timed_into"]
