"""Retraining when the champion is stale, not on a count: its live accuracy on pairs it never trained on (the new
batches', a round's held-out plans') against its validation accuracy, one rule (`rm.live.staleness`) for the
retraining and for the rollouts."""

import dataclasses
import json
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, strategies as st

from orchrm_dagster.contract import RM_SCORES
from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.loop import LoopSettings, LoopState, Round, StepRuns, decide, describe
from orchrm_dagster.loop.read import read_state
from orchrm_dagster.pairs import PairRules, build_pairs_table, current_pair_ids
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.rm.checkpoints import PAIR_IDS_FILE, checkpoints_dir, version_dir
from orchrm_dagster.rm.live import (LiveAccuracy, StalenessRule, latest_held_out, pairs_live_accuracy, plan_pairs,
                                    read_live_accuracy, record_live_accuracy, staleness)
from orchrm_dagster.storage import Warehouse, land, scan_table
from orchrm_dagster.synthetic import generate_runs, write_jsonl
from tests.loop_roots import write_reward_model

SETTINGS = LoopSettings(rounds=3)  # the defaults: retrain_on stale, rollouts auto
STATE = LoopState(ingested_batches=2, inputs="i1", pairs_inputs="i1", pairs=200, new_pairs=40, champion=1, now=1e6,
                  champion_at=1e6 - 3600)


def live(right: int, pairs: int = 40, validation: float = 0.8, source: str = "pairs", problems: int = 10):
    """`right` of `pairs` ranked right, spread evenly over `problems` problems."""
    per, extra = divmod(pairs, problems)
    cells, left = [], right
    for k in range(problems):
        n = per + (k < extra)
        won = min(n, left)
        left -= won
        cells.append((f"p{k}", won, n))
    return LiveAccuracy("math", 1, source, tuple(cells), validation)


def asked(decision, kind):
    return [step for step in decision.steps if step.kind == kind]


def test_a_stale_champion_is_retrained_and_the_tick_says_why():
    decision = decide(dataclasses.replace(STATE, live=(live(right=16),)), SETTINGS)  # 0.4 against 0.8
    [step] = asked(decision, "reward_model")
    assert "stale" in step.why and "0.400 of 40" in step.why and "40 new pairs" in step.why


def test_a_fresh_champion_is_not_retrained_however_many_pairs_arrived_and_the_tick_says_so():
    decision = decide(dataclasses.replace(STATE, new_pairs=5000, live=(live(right=33),)), SETTINGS)
    assert not asked(decision, "reward_model")
    assert "no retraining: fresh" in describe(decision)


def test_the_count_rule_remains_an_option_and_rules_while_no_champion_exists():
    count = dataclasses.replace(SETTINGS, retrain_on="new_pairs", retrain_min_new_pairs=30)
    assert asked(decide(dataclasses.replace(STATE, live=(live(right=33),)), count), "reward_model")
    no_champion = dataclasses.replace(STATE, champion=None, new_pairs=60, live=())
    assert asked(decide(no_champion, SETTINGS), "reward_model")


def test_an_old_champion_retrains_on_new_pairs_even_when_fresh():
    old = dataclasses.replace(STATE, live=(live(right=33),), champion_at=STATE.now - 8 * 86400)
    [step] = asked(decide(old, SETTINGS), "reward_model")
    assert "h old" in step.why
    assert not asked(decide(dataclasses.replace(old, new_pairs=0), SETTINGS), "reward_model")


def test_a_stale_champion_with_nothing_new_to_learn_from_is_not_retrained():
    assert not asked(decide(dataclasses.replace(STATE, new_pairs=0, live=(live(right=10),)), SETTINGS),
                     "reward_model")


def promoted_round():
    return Round(1, "grpo-r0001", True, 1000, "gsm8k", "smollm2-base", ("p1", "p2"), rm_version=1)


def test_rollouts_run_only_while_the_champion_is_stale_or_unmeasured():
    state = dataclasses.replace(STATE, new_pairs=0, rounds=(promoted_round(),))
    fresh = decide(dataclasses.replace(state, live=(live(33, source="held-out plans of round 1"),)), SETTINGS)
    assert not asked(fresh, "rollout") and [s.round for s in asked(fresh, "round")] == [2]
    assert "rolls out nothing" in describe(fresh)
    stale = decide(dataclasses.replace(state, live=(live(10, source="held-out plans of round 1"),)), SETTINGS)
    assert len(asked(stale, "rollout")) == 2 and not asked(stale, "round")
    unmeasured = decide(state, SETTINGS)
    assert len(asked(unmeasured, "rollout")) == 2
    always = decide(dataclasses.replace(state, live=(live(33),)), dataclasses.replace(SETTINGS, rollouts="always"))
    assert len(asked(always, "rollout")) == 2
    # once asked, a rollout is seen through whatever the champion's state
    started = dataclasses.replace(state, live=(live(33),), runs=StepRuns(in_flight=frozenset({"rollout:1:grpo-r0001"})))
    assert not asked(decide(started, SETTINGS), "round")


def test_few_pairs_say_nothing_and_a_tie_is_not_a_win():
    assert not staleness(live(right=0, pairs=10, problems=5), StalenessRule(min_pairs=20))[0]
    plans = [{"problem_id": "a", "score": 1.0, "correct": True, "failure": None},
             {"problem_id": "a", "score": 1.0, "correct": False, "failure": None},
             {"problem_id": "a", "score": 0.0, "correct": False, "failure": None},
             {"problem_id": "b", "score": 0.0, "correct": True, "failure": None},  # no incorrect plan: no pair
             {"problem_id": "a", "score": None, "correct": False, "failure": "execution failed"}]
    assert plan_pairs(plans) == (("a", 1, 2),)


@given(st.lists(st.tuples(st.integers(0, 6), st.integers(1, 6)), min_size=1, max_size=30))
def test_the_interval_holds_the_accuracy_within_zero_and_one(cells):
    measure = LiveAccuracy("math", 1, "pairs", tuple((f"p{i}", min(c, n), n) for i, (c, n) in enumerate(cells)))
    low, high = measure.interval()
    assert 0.0 <= low <= measure.accuracy <= high <= 1.0
    assert measure.upper(0.05) <= high


def land_batch(root, tmp_path, seed: int, first_problem: int) -> None:
    path = tmp_path / f"batch-{seed}.jsonl"
    write_jsonl(generate_runs(128, seed=seed, plans_decide=True, samples_per_problem=8, first_problem=first_problem),
                path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))


def write_champion_scores(root, version: int, agrees: bool) -> None:
    """Scores as a champion that ranks correct runs first (or, `agrees` False, last) writes them: each run batch a
    partition, as `rm_scores` does."""
    labels = scan_table(root, "labels").select("run_id", "is_correct").collect()
    correct = dict(labels.iter_rows())
    for batch in root.batch_ids("runs"):
        ids = pa.concat_tables([pq.read_table(root.fs.open(p)) for p in root.batch_files("runs", batch)])
        ids = ids.column("run_id").to_pylist()
        scores = [float(bool(correct.get(i)) == agrees) for i in ids]
        table = pa.table({"batch_id": [batch] * len(ids), "run_id": ids, "rm_version": [version] * len(ids),
                          "score": scores, "tokens": [10] * len(ids)}, schema=RM_SCORES)
        path = Path(tempfile.mkdtemp(), "scores.parquet")
        pq.write_table(table, path)
        root.replace_batch("rm_scores", batch, [str(path)])


@pytest.mark.filterwarnings("ignore")
def test_a_batch_whose_labels_contradict_the_champion_makes_it_stale_before_it_trains_on_it(storage_root, tmp_path):
    land_batch(storage_root, tmp_path, seed=1, first_problem=0)
    build_pairs_table(storage_root, Warehouse(storage_root), PairRules())
    write_reward_model(storage_root, 1, right=90, validation_pairs={"math": 100})  # validation accuracy 0.9
    current_pair_ids(storage_root).write_parquet(Path(version_dir(str(checkpoints_dir(storage_root)), 1),
                                                      PAIR_IDS_FILE))  # it saw every pair there is now
    write_champion_scores(storage_root, 1, agrees=True)
    assert all(m.pairs == 0 for m in pairs_live_accuracy(storage_root, {"math": 1}))  # nothing it has not seen

    # a new batch on other problems, whose runs it scores the wrong way round: what it never trained on
    land_batch(storage_root, tmp_path, seed=2, first_problem=40)
    build_pairs_table(storage_root, Warehouse(storage_root), PairRules())
    write_champion_scores(storage_root, 1, agrees=False)
    [measure] = [m for m in pairs_live_accuracy(storage_root, {"math": 1}) if m.domain == "math"]
    assert measure.pairs > 20 and measure.accuracy == 0.0 and measure.validation_accuracy == pytest.approx(0.9)

    state = read_state(storage_root)
    assert state.new_pairs >= measure.pairs and state.live
    [step] = [s for s in decide(state, SETTINGS).steps if s.kind == "reward_model"]
    assert "stale" in step.why
    assert record_live_accuracy(storage_root, [measure]) == 1
    assert record_live_accuracy(storage_root, [measure]) == 0  # the same measure is not added twice
    [row] = read_live_accuracy(storage_root).to_dicts()
    assert (row["pairs"], row["correct"], row["source"]) == (measure.pairs, 0, "pairs")


def test_a_rounds_held_out_measure_is_read_back_with_its_problems(storage_root):
    write_reward_model(storage_root, 1, right=80, validation_pairs={"math": 100})
    measure = live(right=12, pairs=30, source="held-out plans of round 1", problems=6)
    record_live_accuracy(storage_root, [measure])
    [back] = latest_held_out(storage_root, {"math": 1})
    assert back == measure and back.upper(0.05) == measure.upper(0.05)
    assert latest_held_out(storage_root, {"math": 2}) == []  # another champion: not its measure
    assert json.loads(read_live_accuracy(storage_root)["by_problem"][0])[0] == ["p0", 5, 5]


def test_while_the_rounds_domain_has_no_champion_new_pairs_are_counted():
    waiting = dataclasses.replace(STATE, new_pairs=60, live=(live(right=33),),
                                  no_champion={"math": "no version beat chance"})
    [step] = asked(decide(waiting, SETTINGS), "reward_model")
    assert "60 new pairs" in step.why
    assert not asked(decide(dataclasses.replace(waiting, new_pairs=10), SETTINGS), "reward_model")


def test_a_measure_of_too_few_pairs_neither_skips_rollouts_nor_retrains():
    few = live(right=5, pairs=10, source="pairs", problems=5)  # 0.5 against 0.8, but 10 pairs say nothing
    state = dataclasses.replace(STATE, new_pairs=1, rounds=(promoted_round(),), live=(few,))
    decision = decide(state, SETTINGS)
    assert len(asked(decision, "rollout")) == 2 and not asked(decision, "reward_model")
    assert staleness(few, StalenessRule())[0] is None
