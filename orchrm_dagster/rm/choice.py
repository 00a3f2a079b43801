"""The Best-of-N rule, written once: which of N scored candidate plans is the one to run.

Production selection (`orchestration.best_of_n`), the evaluation's `orchrm_bon` and `orchrm serve` all call it:
  1. a plan that parses comes before one that does not (a plan that cannot run is never preferred);
  2. then the higher reward-model score (a candidate without a score, or with NaN, comes last);
  3. ties go to the plan with the lower plan hash (`contract.plan_hash`: whitespace-normalised BLAKE2b of the text):
     the same plan wins whatever order or run ids the candidates came with;
  4. the same plan twice (same hash): the earlier candidate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.plans import PlanError, parse_plan


def plan_error(plan: str) -> str | None:
    """Why `plan` is not a plan that can run (the parser's verdict, as sampling records it); None: it parses."""
    parsed = parse_plan(plan)
    return str(parsed) if isinstance(parsed, PlanError) else None


def plan_parses(plan: str) -> bool:
    return plan_error(plan) is None


def best_of_n_order(parses: Sequence[bool], scores: Sequence[float | None], plan_hashes: Sequence[str],
                    groups: Sequence[int] | None = None) -> np.ndarray:
    """Candidate indices, best first by the rule above (within each of `groups`, in group order, when given: the
    evaluation ranks every problem's pool at once)."""
    count = len(parses)
    if not (len(scores) == len(plan_hashes) == count) or (groups is not None and len(groups) != count):
        raise ValueError("parses, scores, plan_hashes (and groups) must be of one length")
    if not count:
        return np.zeros(0, dtype=np.int64)
    values = np.array([math.nan if s is None else float(s) for s in scores], dtype=np.float64)
    unscored = np.isnan(values)
    _, hash_rank = np.unique(np.asarray(plan_hashes, dtype=object).astype(str), return_inverse=True)
    keys = [np.arange(count), hash_rank, -np.where(unscored, 0.0, values), unscored,
            ~np.asarray(parses, dtype=bool)]
    if groups is not None:
        keys.append(np.asarray(groups))
    return np.lexsort(keys)  # the last key sorts first


@dataclass(frozen=True)
class Pick:
    chosen: int  # the index of the plan to run
    unparseable: dict[int, str]  # index -> why, of each candidate that does not parse


def best_of_n_pick(plans: Sequence[str], scores: Sequence[float | None]) -> Pick:
    """The rule on plan texts (parsed and hashed here): what `orchrm serve` answers."""
    errors = [plan_error(plan) for plan in plans]
    order = best_of_n_order([e is None for e in errors], scores, [plan_hash(plan) for plan in plans])
    return Pick(int(order[0]), {i: error for i, error in enumerate(errors) if error is not None})
