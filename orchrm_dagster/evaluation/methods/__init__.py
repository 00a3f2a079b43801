"""The registry of Best-of-N evaluation methods: the ways of choosing among N candidate runs.

Each method is a module of this package that registers an `EvaluationMethod` when it is imported; the first read of
the registry imports every module here. The settings' validation, the CLI's `--methods`, the `evaluation` asset and
`evaluate` read the registry, so a new method is one new module (and its test). What several methods compute alike
(a ranked choice, the candidate sets, per-problem means, a judge's picks) is in `common`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum


class MethodKind(Enum):
    """How a method chooses; it decides what the method's `choose` is given and returns."""

    # Exactly, over each problem's whole pool (a ranking by a per-run key, or a closed form such as the oracle's):
    # choose(pool, n, settings) -> one row per GROUP with accuracy, verification, execution.
    RANKED = "ranked"
    # Over the problem's candidate sets (every one, or seeded draws):
    # choose(members, n, settings) -> one row per pkey with accuracy, verification, execution.
    CANDIDATE_SET = "candidate_set"
    # An LLM names one candidate of each judged set: choose(root, runs) -> {run_id: the text the judge is shown},
    # `runs` holding the run_id, plan and final_answer of the judged sets' runs.
    LLM_JUDGE = "llm_judge"


@dataclass(frozen=True)
class EvaluationMethod:
    name: str
    description: str  # one line: the CLI's help shows it
    kind: MethodKind
    choose: Callable  # see MethodKind for what each kind is given and returns
    executes_all: bool  # every one of the N candidates is executed (else only the chosen one)
    needs_reward_model: bool = False  # ranks by the champion's scores (the pool's `score`)
    needs_verifier_panel: bool = False  # reads the collaborative verifier's panel scores (`verifier_static`)
    judge_prompt: str | None = None  # an LLM judge's prompt (orchrm_dagster/mas/prompts/<judge_prompt>.txt)
    max_n: int | None = None  # evaluated only up to this N (the one-sample baseline: 1)

    def __post_init__(self) -> None:
        if (self.kind is MethodKind.LLM_JUDGE) != (self.judge_prompt is not None):
            raise ValueError(f"evaluation method {self.name!r}: an LLM judge, and only an LLM judge, has a "
                             f"judge_prompt")

    @property
    def needs_llm(self) -> bool:
        """Whether evaluating it takes an LLM backend."""
        return self.kind is MethodKind.LLM_JUDGE


_REGISTRY: dict[str, EvaluationMethod] = {}
_modules_imported = False


def register_method(method: EvaluationMethod) -> EvaluationMethod:
    """Adds `method` to the registry (what a method's module does when imported)."""
    if _REGISTRY.get(method.name, method) is not method:
        raise ValueError(f"two evaluation methods are named {method.name!r}")
    _REGISTRY[method.name] = method
    return method


def registered_methods() -> dict[str, EvaluationMethod]:
    """Every registered method by name, sorted by name."""
    _import_method_modules()
    return dict(sorted(_REGISTRY.items()))


def method_names() -> tuple[str, ...]:
    return tuple(registered_methods())


def method_named(name: str) -> EvaluationMethod:
    """The registered method `name`; ValueError naming it and the known ones otherwise."""
    methods = registered_methods()
    if name not in methods:
        raise ValueError(f"unknown evaluation method {name!r}; known: {', '.join(methods)}")
    return methods[name]


def _import_method_modules() -> None:
    global _modules_imported
    if not _modules_imported:
        for module in pkgutil.iter_modules(__path__):
            importlib.import_module(f"{__name__}.{module.name}")
        _modules_imported = True
