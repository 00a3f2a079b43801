"""Every token the loop spends is counted where it is spent: its rounds', its rollouts' (the runs the promoted
checkpoint and its base policy sample and execute on the round's training problems, each run once) and its
reward-model retrainings' since the first round (training and rescoring); the token budget stops on all of them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from orchrm_dagster.grpo import round_tokens
from orchrm_dagster.grpo.checkpoints import policy_store
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.loop import LoopSettings, StepRuns, decide, read_state
from orchrm_dagster.rm.checkpoints import checkpoints_dir, version_dir
from orchrm_dagster.storage import MANIFEST, land
from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.loop_roots import round_row, write_reward_model, write_rounds, write_scores

TRAIN = ("gsm8k-test-0001", "gsm8k-test-0002")


def rollout_runs(policy: str, seed: int, problems=TRAIN) -> list[dict]:
    """Runs as a rollout makes them: run ids `policy/problem/seed<S>/<i>`, 100 + 10 tokens each."""
    records = []
    for problem in problems:
        for i, record in enumerate(generate_runs(2, seed=seed, benchmarks=("gsm8k_test",), samples_per_problem=2)):
            records.append(record | {"run_id": f"{policy}/{problem}/seed{seed}/{i}", "problem_id": problem,
                                     "policy": {"name": policy, "kind": "base"},
                                     "tokens": {"orchestrator": 100, "subagents": 10}})
    return records


def test_rollouts_and_retraining_count_towards_the_budget(storage_root, tmp_path):
    root = storage_root
    records = (rollout_runs("grpo-r0001", 0) + rollout_runs("smollm2-base", 0)
               + rollout_runs("smollm2-base", 7)  # another seed: not this loop's rollouts
               + rollout_runs("grpo-r0001", 0, problems=("gsm8k-test-0009",)))  # not the round's problems
    path = tmp_path / "runs.jsonl"
    write_jsonl(records, path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    write_reward_model(root, 1, right=40, validation_pairs={"math": 40})  # round 1's champion
    row = round_row(1, rm_version=1)
    write_rounds(root, [row])
    folder = policy_store(root).folder(1)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"benchmark": "gsm8k", "scratch_policy": "smollm2-base",
                                               "train_problems": list(TRAIN)}))
    assert read_state(root).spending(0).retraining == 0  # no version after round 1's champion yet
    write_reward_model(root, 2, right=40, validation_pairs={"math": 40})  # retrained on the rollouts
    manifest = Path(version_dir(str(checkpoints_dir(root)), 2), MANIFEST)
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"training_tokens": 5000}))
    assert read_state(root).spending(0).retraining == 5000  # trained, nothing rescored yet
    write_scores(root, 2)  # every run rescored by it, 10 tokens a run (no batch changes: the count must follow)
    spent = read_state(root).spending(0)
    runs = len(records)
    assert spent.rounds == round_tokens(row)
    assert spent.rollouts == 2 * len(TRAIN) * 2 * 110  # two policies x two problems x two samples, seed 0 only
    assert spent.retraining == 5000 + 10 * runs
    assert read_state(root).spending(7).rollouts == len(TRAIN) * 2 * 110  # a loop seeded 7: its own rollouts
    assert read_state(root).spending(0, rollout_base=False).rollouts == len(TRAIN) * 2 * 110  # the checkpoint's
    # the chain done (pairs built, runs scored, round 1 rolled out): a budget the rounds alone have not spent stops
    rolled_out = StepRuns(succeeded=frozenset({"rollout:1:grpo-r0001", "rollout:1:smollm2-base"}))
    state = dataclasses.replace(read_state(root, rolled_out), batches=(), pending=(), pairs=0, batches_to_score=())
    state = dataclasses.replace(state, pairs_inputs=state.inputs)
    assert decide(state, LoopSettings(rounds=5)).steps[0].kind == "round"
    stopped = decide(state, LoopSettings(rounds=5, token_budget=spent.rounds + 1)).stopped
    assert stopped and "token budget" in stopped and f"rollouts {spent.rollouts:,}" in stopped
