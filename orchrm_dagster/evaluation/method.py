"""What a Best-of-N evaluation method is (`EvaluationMethod`), what its preparation reads and leaves, and the registry
of methods (`METHODS`), filled by the modules of `orchrm_dagster.evaluation.methods` (one module a method) and by
other packages (entry points of `orchrm.methods`, or a dotted path in the settings)."""

from __future__ import annotations

import time
from contextlib import contextmanager

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from orchrm_dagster.registry import Registry

if TYPE_CHECKING:
    import polars as pl

# EvaluationSettings (orchrm_dagster.evaluation.settings) is named in annotations only, never imported: the settings
# validate method names against METHODS, so an import here would tie the two modules in a circle


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
    # prepare(preparation) adds the per-run columns `choose` reads to preparation.pool, once per evaluation and
    # before any choice; methods that name the same function share one call (see `prepare_pool`)
    prepare: Callable[[Preparation], None] | None = None
    judge_prompt: str | None = None  # an LLM judge's prompt (orchrm_dagster/mas/prompts/<judge_prompt>.txt)
    # an LLM judge: "full" reads every candidate whole (a knockout when N do not fit its context), "truncated" cuts
    # each at the judge settings' max_candidate_chars (see evaluation.judges)
    judge_reading: str = "full"
    max_n: int | None = None  # evaluated only up to this N (the one-sample baseline: 1)
    # why the method is left out of an evaluation with the given settings (None: it is evaluated); said in its notes
    left_out: Callable[[EvaluationSettings], str | None] | None = None  # noqa: F821 (see above)

    def __post_init__(self) -> None:
        if (self.kind is MethodKind.LLM_JUDGE) != (self.judge_prompt is not None):
            raise ValueError(f"evaluation method {self.name!r}: an LLM judge, and only an LLM judge, has a "
                             f"judge_prompt")

    @property
    def needs_llm(self) -> bool:
        """Whether evaluating it takes an LLM backend."""
        return self.kind is MethodKind.LLM_JUDGE


@dataclass
class Preparation:
    """What a method's `prepare` reads (the evaluation's storage root, settings, champions and the problems each
    domain's champion saw) and what it leaves: the pool with its columns added, rows for tables written with the
    evaluation (by table name), notes, and figures reported beside the evaluation (by method)."""

    root: Any
    pool: pl.DataFrame
    settings: EvaluationSettings  # noqa: F821
    evaluation_id: str
    champions: Mapping[str, int]
    seen: Mapping[str, frozenset[str]]
    tables: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    reports: dict[str, dict] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # each method's preparation wall time


def prepare_pool(preparation: Preparation, methods: list[EvaluationMethod]) -> Preparation:
    """Runs each distinct `prepare` of `methods` once, in the methods' order (nothing for an empty pool); its wall
    time goes to `preparation.seconds` under the first method that names it."""
    if preparation.pool.height:
        first_named = {}
        for method in methods:
            if method.prepare is not None:
                first_named.setdefault(method.prepare, method.name)
        for prepare, name in first_named.items():
            with timed_into(preparation.seconds, name):
                prepare(preparation)
    return preparation


@contextmanager
def timed_into(seconds: dict[str, float], name: str):
    """Adds the block's wall time to `seconds[name]`."""
    started = time.perf_counter()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.perf_counter() - started


METHODS: Registry[EvaluationMethod] = Registry("evaluation method", "orchrm_dagster.evaluation.methods",
                                               group="orchrm.methods",
                                               skip=("common",), entry_type=EvaluationMethod)
register_method = METHODS.register
registered_methods = METHODS.all
method_names = METHODS.names
method_named = METHODS.named
