"""What counts as new pairs since the latest reward-model version trained, on real runs, labels and pairs: a
rollout on problems whose pairs are at their caps replaces pairs without adding to their number, and still counts."""

import json
from pathlib import Path

import pytest

from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.pairs import PairRules, build_pairs_table, current_pair_ids
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.rm import RMTrainConfig, train_on_current_pairs
from orchrm_dagster.rm.checkpoints import PAIR_IDS_FILE
from orchrm_dagster.rm.versions import new_pairs_since_training
from orchrm_dagster.storage import Warehouse, land
from orchrm_dagster.synthetic import generate_runs, write_jsonl

pytestmark = pytest.mark.filterwarnings("ignore")

FIRST_PROBLEM = 5


def rollout(root, tmp_path, seed: int, runs: int, samples_per_problem: int) -> None:
    """Lands, ingests and labels `runs` runs on the same problems (from FIRST_PROBLEM on); the seed changes the plans."""
    path = tmp_path / f"rollout-{seed}.jsonl"
    write_jsonl(generate_runs(runs, seed=seed, plans_decide=True, samples_per_problem=samples_per_problem,
                              first_problem=FIRST_PROBLEM), path)
    landed = land(root, path)
    ingest_batch(root, landed.batch_id, landed.path)
    label_batch(root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))


def build_pairs(root) -> set[str]:
    build_pairs_table(root, Warehouse(root), PairRules())
    return set(current_pair_ids(root).get_column("pair_id").to_list())


def train(root, backbone):
    [outcome] = train_on_current_pairs(root, RMTrainConfig(backbone=backbone, max_length=64, epochs=1,
                                                           batch_size=4))  # one shared model by default
    return outcome


def test_a_rollout_on_problems_at_their_pair_caps_counts_as_new_pairs(storage_root, tiny_backbone, tmp_path):
    rules = PairRules()
    # 3 problems x 32 runs: far more candidates than the caps (12 specialized, 4 correct per problem) keep
    rollout(storage_root, tmp_path, seed=1, runs=96, samples_per_problem=32)
    before = build_pairs(storage_root)
    at_caps = 3 * (rules.specialized_per_problem + rules.correct_per_problem)
    assert len(before) == at_caps  # every problem's pairs at their caps
    assert new_pairs_since_training(storage_root) is None  # no version trained yet
    outcome = train(storage_root, tiny_backbone)
    assert Path(outcome.path, PAIR_IDS_FILE).exists()
    assert new_pairs_since_training(storage_root) == 0

    # more runs on the same problems, with other plans: some of their pairs win places under the caps
    rollout(storage_root, tmp_path, seed=2, runs=96, samples_per_problem=32)
    after = build_pairs(storage_root)
    assert len(after) == len(before)  # the count did not move...
    new = new_pairs_since_training(storage_root)
    assert new == len(after - before) > 0  # ...but the pairs did
    assert new > len(after) - len(before)

    train(storage_root, tiny_backbone)
    assert new_pairs_since_training(storage_root) == 0  # counted from the latest version


def test_a_version_trained_before_pair_ids_were_recorded_falls_back_to_the_count(storage_root, tiny_backbone,
                                                                                  tmp_path):
    # 6 problems x 8 runs: below the caps, so a second rollout adds to the number of pairs
    rollout(storage_root, tmp_path, seed=1, runs=48, samples_per_problem=8)
    build_pairs(storage_root)
    outcome = train(storage_root, tiny_backbone)
    Path(outcome.path, PAIR_IDS_FILE).unlink()  # as a version trained before the file existed left it
    manifest = json.loads(Path(outcome.path, "manifest.json").read_text())
    assert manifest["pairs_available"] == current_pair_ids(storage_root).height
    assert new_pairs_since_training(storage_root) == 0

    rollout(storage_root, tmp_path, seed=2, runs=48, samples_per_problem=8)
    pairs_now = len(build_pairs(storage_root))
    assert pairs_now > manifest["pairs_available"]
    assert new_pairs_since_training(storage_root) == pairs_now - manifest["pairs_available"]


def test_a_batch_without_runs_is_scored_once_not_for_ever(storage_root, tiny_backbone, tmp_path):
    """Its scores hold no version (no row), which must not read as 'not scored by the champion'."""
    from orchrm_dagster.ingest import ingest_batch
    from orchrm_dagster.rm import RMTrainConfig, ScoringSettings, batches_to_score, score_runs, train_new_version

    from ..rm.toy import NO_FLOOR, toy_pairs

    train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(4, 1),
                      RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                                    **NO_FLOOR))
    (tmp_path / "empty.jsonl").write_text("not json\n")
    landed = land(storage_root, tmp_path / "empty.jsonl")
    ingest_batch(storage_root, landed.batch_id, landed.path)  # every line quarantined: a batch of no runs
    assert batches_to_score(storage_root) == [landed.batch_id]
    score_runs(storage_root, ScoringSettings(device="cpu", max_length=64))
    assert batches_to_score(storage_root) == []


def test_the_pairs_and_each_version_name_the_batches_they_were_built_from(storage_root, tiny_backbone, tmp_path):
    """What the loop's barrier reads: the pairs record each ingested batch with its runs' generation; a version, the
    pairs it trained on; a batch ingested again (a rollout file that grew) is another generation."""
    from orchrm_dagster.pairs import pairs_batches
    from orchrm_dagster.rm import trained_batches
    from orchrm_dagster.storage import read_index

    rollout(storage_root, tmp_path, seed=1, runs=48, samples_per_problem=8)
    build_pairs(storage_root)
    first = read_index(storage_root).generations
    assert pairs_batches(storage_root) == first and list(first) == ["rollout-1.jsonl"]
    outcome = train(storage_root, tiny_backbone)
    assert trained_batches(storage_root, outcome.version) == first

    rollout(storage_root, tmp_path, seed=2, runs=48, samples_per_problem=8)
    assert pairs_batches(storage_root) == first  # not rebuilt yet: the pairs still say what they read
    build_pairs(storage_root)
    now = read_index(storage_root).generations
    assert pairs_batches(storage_root) == now and set(now) == {"rollout-1.jsonl", "rollout-2.jsonl"}
    assert trained_batches(storage_root, outcome.version) == first  # the version's record never changes
