"""Where a round starts, and with which reward model: MAS-Orchestra's two recipes.

continue: from the specialized policy, rewarded by a reward model trained on every pair;
scratch:  from the base policy, rewarded by a reward model trained on correct-over-incorrect pairs only (a model that
          has learnt "specialized beats base" would reward imitation of the specialized policy, not correctness).

Either way a round continues from the last promoted checkpoint of its own lineage (the chain of rounds back to the
registry policy it began from), never from another recipe's checkpoint nor from the base again.
"""

from __future__ import annotations

import json
from typing import Literal

from orchrm_dagster.grpo.checkpoints import policy_store
from orchrm_dagster.grpo.gate import ACCURACY_GATE
from orchrm_dagster.pairs import CORRECT_OVER_INCORRECT
from orchrm_dagster.storage import StorageRoot, scan_table

Start = Literal["continue", "scratch"]


def reward_model_sources(start: Start) -> tuple[str, ...]:
    """The pair sources the reward model of a recipe trains on (empty: every source)."""
    return (CORRECT_OVER_INCORRECT,) if start == "scratch" else ()


def recipe_problem(start: Start, trained_on: tuple[str, ...] | None) -> str | None:
    """Why a reward model trained on `trained_on` pair sources cannot reward a `start` round (None: it can)."""
    wanted = reward_model_sources(start)
    if not wanted or tuple(trained_on or ()) == wanted:
        return None
    shown = ", ".join(trained_on) if trained_on else "every source"
    return (f"a from-scratch round is rewarded by a reward model trained on {', '.join(wanted)} pairs only; the "
            f"champion was trained on {shown}. `orchrm loop --start scratch` (or the loop with round.start: scratch) "
            f"retrains it so; by hand, materialize reward_model with pair_sources: [{', '.join(wanted)}]")


def lineage_origin(rounds: list[dict], policy: str) -> str | None:
    """The registry policy a checkpoint's chain of rounds began from (the policy itself if it is not a checkpoint of
    these rounds; None when a round on the way did not record where it started)."""
    started_from = {row["policy_checkpoint"]: row.get("start_policy") for row in rounds}
    seen = set()
    while policy in started_from:
        if policy in seen:
            return None
        seen.add(policy)
        policy = started_from[policy]
        if policy is None:
            return None
    return policy


def latest_of_lineage(checkpoints: list[dict], rounds: list[dict], before_round: int, origin: str,
                      unknown_counts: bool) -> dict | None:
    """The latest promoted checkpoint before `before_round` whose lineage began at `origin` (`unknown_counts`:
    checkpoints of rounds that did not record their start count as this lineage's, as rounds before lineages did)."""
    def belongs(row: dict) -> bool:
        found = lineage_origin(rounds, row["name"])
        return found == origin or (found is None and unknown_counts)

    rows = [r for r in checkpoints if r["round"] < before_round and r["promoted"] and belongs(r)]
    return max(rows, key=lambda r: r["round"]) if rows else None


def verified_checkpoints(rounds: list[dict]) -> tuple[str, ...]:
    """The checkpoints this root promoted on measured held-out accuracy (`rounds`: grpo_rounds rows): their runs win
    specialized-over-base pairs (`pairs.policy_side`). A checkpoint promoted on its reward alone, or before the gate
    was recorded (`gate` null), is not: the reward model it was trained against would be judging itself."""
    return tuple(sorted(row["policy_checkpoint"] for row in rounds
                        if row.get("policy_checkpoint") and row.get("promoted") and row.get("gate") == ACCURACY_GATE))


def held_out_problems(root: StorageRoot) -> frozenset[str]:
    """The problems the evaluation and the rounds hold out: every problem an evaluation was measured on, and the
    held-out problems each published round recorded in its checkpoint's manifest (read alone, never the weights)."""
    evaluated = scan_table(root, "evaluation_problems").select("problem_id").unique().collect()["problem_id"]
    found = set(evaluated.drop_nulls().to_list())
    for name in policy_store(root).remote_manifests():
        with root.fs.open(name, "r") as source:
            found.update(json.load(source).get("heldout_problems") or ())
    return frozenset(found)
