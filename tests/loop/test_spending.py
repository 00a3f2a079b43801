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


TAG = "0123456789"  # the rollouts' execution key (ExecutionSettings.run_tag)


def rollout_runs(policy: str, seed: int, problems=TRAIN, tag: str = TAG) -> list[dict]:
    """Runs as a rollout makes them: run ids `policy/problem/seed<S>-x<tag>/<i>`, 100 + 10 tokens each (no tag: as
    the main job makes them, under the same seed)."""
    records = []
    suffix = f"-x{tag}" if tag else ""
    for problem in problems:
        for i, record in enumerate(generate_runs(2, seed=seed, benchmarks=("gsm8k_test",), samples_per_problem=2)):
            records.append(record | {"run_id": f"{policy}/{problem}/seed{seed}{suffix}/{i}", "problem_id": problem,
                                     "policy": {"name": policy, "kind": "base"},
                                     "tokens": {"orchestrator": 100, "subagents": 10}})
    return records


def test_rollouts_and_retraining_count_towards_the_budget(storage_root, tmp_path):
    root = storage_root
    records = (rollout_runs("grpo-r0001", 0) + rollout_runs("smollm2-base", 0)
               + rollout_runs("smollm2-base", 7)  # another seed: not this loop's rollouts
               + rollout_runs("grpo-r0001", 0, problems=("gsm8k-test-0009",))  # not the round's problems
               + rollout_runs("smollm2-base", 0, tag=""))  # the main job's runs of the base policy: not the loop's
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
    write_scores(root, 1)  # the unchanged champion scores the runs: its scoring of the loop's rollouts is spent
    tagged = sum(1 for r in records if "-x" in r["run_id"])
    assert read_state(root).spending(0).retraining == 10 * tagged
    write_reward_model(root, 2, right=40, validation_pairs={"math": 40})  # retrained on the rollouts
    manifest = Path(version_dir(str(checkpoints_dir(root)), 2), MANIFEST)
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"training_tokens": 5000}))
    assert read_state(root).spending(0).retraining == 5000 + 10 * tagged  # trained, nothing rescored by it yet
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


def test_a_killed_attempts_tokens_count_and_the_budget_stops_before_a_retry_could_overrun_it(storage_root):
    from orchrm_dagster.spending import journal, journals, spend

    root = storage_root
    write_reward_model(root, 1, right=40, validation_pairs={"math": 40})
    row = round_row(1, rm_version=1, attempt="committed1")
    write_rounds(root, [row])
    folder = policy_store(root).folder(1)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"benchmark": "gsm8k", "scratch_policy": "smollm2-base",
                                               "train_problems": list(TRAIN)}))
    with journal(root, "r0001", "committed1"):  # the attempt that wrote round 1's row: counted once, from the row
        spend("heldout", 9_999)
    try:
        with journal(root, "r0002", "killed1"):  # round 2's first attempt dies half way: its tokens are spent
            spend("heldout", 700)
            spend("generation", 50)
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert {j["attempt"]: sum(j["tokens"].values()) for j in journals(root)} == {"committed1": 9_999, "killed1": 750}
    spent = read_state(root).spending(0)
    assert spent.rounds == round_tokens(row) + 750 and spent.unfinished == 750
    assert "750 of it in attempts that did not finish" in spent.text()
    rolled_out = StepRuns(succeeded=frozenset({"rollout:1:grpo-r0001", "rollout:1:smollm2-base"}))
    state = dataclasses.replace(read_state(root, rolled_out), batches=(), pending=(), pairs=0, batches_to_score=())
    state = dataclasses.replace(state, pairs_inputs=state.inputs)
    assert state.largest_round_tokens == 9_999
    assert decide(state, LoopSettings(rounds=5, token_budget=spent.total + 10_000)).steps[0].kind == "round"
    stopped = decide(state, LoopSettings(rounds=5, token_budget=spent.total + 9_000)).stopped
    assert stopped and "could overrun the token budget" in stopped and "9,999" in stopped


def test_a_rollout_stands_only_on_runs_made_under_its_own_execution_settings(storage_root):
    from orchrm_dagster.orchestration import ExecutionSettings, PolicySpec, run_id_for

    root = storage_root
    write_reward_model(root, 1, right=40, validation_pairs={"math": 40})
    write_rounds(root, [round_row(1, rm_version=1)])
    folder = policy_store(root).folder(1)
    folder.mkdir(parents=True)
    (folder / MANIFEST).write_text(json.dumps({"benchmark": "gsm8k", "scratch_policy": "smollm2-base",
                                               "train_problems": list(TRAIN)}))
    state = dataclasses.replace(read_state(root), batches=(), pending=(), pairs=0, batches_to_score=())
    state = dataclasses.replace(state, pairs_inputs=state.inputs)
    settings = LoopSettings(rounds=5)
    rollouts = [s for s in decide(state, settings).steps if s.kind == "rollout"]
    assert {s.policy for s in rollouts} == {"grpo-r0001", "smollm2-base"}
    tag = settings.rollout_execution.run_tag
    assert all(s.sampling.run_tag == tag for s in rollouts) and tag
    # the base policy's rollout ids are not the main job's (seed 0 both): it executes its own plans
    base = PolicySpec(name="smollm2-base", kind="base")
    assert run_id_for(base, TRAIN[0], 0, 0, tag) != run_id_for(base, TRAIN[0], 0, 0)
    # a run is made alike only under the same environment, truth and sub-agent settings; how many run at once is not
    execution = settings.rollout_execution
    assert dataclasses.replace(execution, concurrent_plans=1).run_tag == tag
    assert dataclasses.replace(execution, subagent_max_new_tokens=7).run_tag != tag
    assert ExecutionSettings().in_environment("simulated", "debate_sink").run_tag != \
        ExecutionSettings().in_environment("simulated").run_tag
