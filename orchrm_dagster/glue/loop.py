"""The loop that keeps learning, driven in-process (`orchrm loop --rounds N`): each round trains a new policy
checkpoint with GRPO; the checkpoint samples and executes plans on the round's training problems; they land and are
ingested and labeled; pairs are rebuilt; the reward model retrains once enough new pairs arrived (the champion gate
decides); the runs are scored; the next round trains against the champion. The sensors in assets/sensors.py do the
same unattended."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import dagster as dg

import sql
from orchrm_dagster.glue.commands import (failure_messages, ingest_landed, materialize_selection, orchestrate,
                                          register_orchestration_partitions)
from orchrm_dagster.glue.instance import cli_instance
from orchrm_dagster.glue.main_job import StepFailed, materialize_or_fail
from orchrm_dagster.grpo import GRPOSettings, LoopSettings, policy_manifest, policy_name, read_table
from orchrm_dagster.rm import pairs_since_champion


# Sub-agent work of rollouts: as the main job's, short enough for a CPU loop.
ROLLOUT_EXECUTION = {"subagent_max_new_tokens": 96, "agents": {"sc_samples": 3, "debate_rounds": 1}}


@dataclass(frozen=True)
class LoopRound:
    round: int
    row: dict  # its grpo_rounds row
    retrained: bool  # the reward model retrained on the pairs its rollouts added
    champion: int | None  # the champion after the round


def tokens_spent(rows: list[dict]) -> int:
    return sum(r["generation_tokens"] + r["reward_tokens"] + r["rollout_tokens"] for r in rows)


def next_round(rows: list[dict]) -> int:
    return max((r["round"] for r in rows), default=0) + 1


def run_loop(defs: dg.Definitions, rounds: int, loop: LoopSettings, grpo: dict | None = None,
             execution: dict | None = None, on_step: Callable[[str], None] = lambda text: None,
             on_round: Callable[[LoopRound], None] = lambda done: None) -> list[LoopRound]:
    """Runs `rounds` more rounds (fewer when loop.token_budget is reached: the loop stops cleanly between rounds)."""
    storage = defs.resources["storage"]
    root = storage.storage_root()
    grpo = grpo or {}
    settings = GRPOSettings(**grpo)
    done = []
    for _ in range(rounds):
        rows = read_table(root, "grpo_rounds")
        if loop.token_budget is not None and tokens_spent(rows) >= loop.token_budget:
            on_step(f"token budget reached ({tokens_spent(rows):,} of {loop.token_budget:,}): the loop stops")
            break
        number = next_round(rows)
        cli_instance().add_dynamic_partitions("grpo_rounds", [str(number)])
        on_step(f"round {number}: GRPO")
        result = materialize_selection(defs, 'key:"grpo_round"', str(number),
                                       {"ops": {"grpo_round": {"config": grpo}}} if grpo else None)
        if not result.success:
            raise StepFailed(f"round {number} failed (run {result.run_id}); the previous policy stays in use: "
                             + "; ".join(failure_messages(result)))
        row = next(r for r in read_table(root, "grpo_rounds") if r["round"] == number)
        on_step(f"round {number}: the new checkpoint samples and executes plans on its training problems")
        rollout(defs, number, settings, loop, execution)
        retrained = _refresh_reward_model(defs, loop, on_step, number)
        champion = storage.warehouse().query(sql.load("champion_checkpoint")).to_pylist()
        done.append(LoopRound(number, row, retrained, champion[0]["version"] if champion else None))
        on_round(done[-1])
    return done


def rollout(defs: dg.Definitions, round_number: int, settings: GRPOSettings, loop: LoopSettings,
            execution: dict | None = None) -> None:
    """The round's checkpoint samples `rollout_samples` plans per training problem and executes them, and so does
    the base policy (its runs are what the checkpoint's plans are preferred over, specialized-over-base); the runs
    are landed, ingested and labeled. A base plan already executed is not executed again."""
    from orchrm_dagster.orchestration import execution_batch_name

    manifest = policy_manifest(defs.resources["storage"].storage_root(), round_number)
    register_orchestration_partitions(defs)
    sampling = {"n_samples": loop.rollout_samples, "problem_ids": manifest["train_problems"]}
    execution = execution if execution is not None else ROLLOUT_EXECUTION
    batches = []
    for policy in (policy_name(round_number), settings.scratch_policy):
        result = orchestrate(defs, settings.benchmark, policy, sampling, execution)
        if not result.success:
            raise StepFailed(f"rollout of {policy} after round {round_number} failed: "
                             + "; ".join(failure_messages(result)))
        batches.append(execution_batch_name(f"{settings.benchmark}|{policy}"))
    for outcome in ingest_landed(defs, batches):
        if outcome.status != "SUCCESS":
            raise StepFailed(f"ingesting the rollout of round {round_number}: {outcome.status}")


def _refresh_reward_model(defs, loop: LoopSettings, on_step, number: int) -> bool:
    storage = defs.resources["storage"]
    materialize_or_fail(defs, 'key:"pairs"')
    pairs_now = storage.warehouse().query(sql.load("pairs_total")).to_pylist()[0]["pairs"]
    new = pairs_since_champion(storage.storage_root(), pairs_now)
    retrain = new is None or new >= loop.retrain_min_new_pairs
    if retrain:
        on_step(f"round {number}: {new} new pairs since the champion trained: the reward model retrains")
        materialize_or_fail(defs, 'key:"reward_model"')
    else:
        on_step(f"round {number}: {new} new pairs (< {loop.retrain_min_new_pairs}): the champion stays")
    materialize_or_fail(defs, 'key:"rm_scores"')
    return retrain
