"""The off-the-shelf reward-model baseline (scored by the champion's RewardScorer, cached) and the verifier panel's
ranking evaluator and fitted fusion weights (fitted on held-in runs only, with the fixed weights as fallback)."""

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from orchrm_dagster.evaluation import EvaluationSettings, VerifierSettings, VerifierWeights, evaluate
from orchrm_dagster.evaluation.methods.collaborative_verifier import fit_fusion
from orchrm_dagster.evaluation.settings import OffShelfRMSettings
from orchrm_dagster.evaluation.verifier import PANEL_EVALUATORS, pairwise_rank
from orchrm_dagster.rm import RewardScorer
from orchrm_dagster.rm.template import InputSpec, write_input_spec
from orchrm_dagster.storage import scan_table
from tests.evaluation.test_evaluate import NO_SIMILARITY, evaluated_root  # noqa: F401  (a fixture)
from tests.tiny_models import make_tiny_backbone

PANEL = ("collaborative_verifier", "collaborative_verifier_fixed")


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    return make_tiny_backbone(tmp_path_factory.mktemp("tiny-backbone"))


@pytest.fixture
def counted_scoring(monkeypatch):
    """Counts the plans RewardScorer reads."""
    scored = []
    original = RewardScorer.score_with_lengths

    def counting(self, questions, plans):
        scored.extend(plans)
        return original(self, questions, plans)

    monkeypatch.setattr(RewardScorer, "score_with_lengths", counting)
    return scored


# ---------------------------------------------------------------- off-the-shelf reward model


def test_the_offshelf_model_is_scored_by_the_reward_scorer_and_cached(evaluated_root, tiny_backbone, counted_scoring,
                                                                      tmp_path):
    root, records, seen = evaluated_root
    settings = EvaluationSettings(methods=("single", "offshelf_rm"), ns=(1, 8),
                                  offshelf_rm=OffShelfRMSettings(model=tiny_backbone, device="cpu"))
    first = evaluate(root, settings)
    assert len(counted_scoring) == 72  # the held-out runs only
    cache = scan_table(root, "offshelf_scores").collect()
    assert cache.height == 72 and cache["run_id"].n_unique() == 72
    # the champion's input spec (the training defaults: the fake champion left no manifest), its scorer
    assert json.loads(cache["input_spec"][0]) == {"input_format": "graph_first", "max_length": 512,
                                                  "thinking_tokens": 128}
    reference = shutil.copytree(tiny_backbone, tmp_path / "reference")
    write_input_spec(str(reference), InputSpec())
    by_run = {r["run_id"]: r for r in records}
    run_ids = cache["run_id"].to_list()
    expected, tokens = RewardScorer(str(reference), "cpu").score_with_lengths(
        [by_run[r]["question"] for r in run_ids], [by_run[r]["plan"] for r in run_ids])
    assert cache["score"].to_list() == pytest.approx(expected, abs=1e-5) and cache["tokens"].to_list() == tokens
    at8 = next(r for r in first.rows if r["method"] == "offshelf_rm" and r["n"] == 8)
    per_problem = cache.join(pl.DataFrame({"run_id": list(by_run), "problem_id": [by_run[r]["problem_id"]
                                                                                  for r in by_run]}), on="run_id")
    assert at8["verification_tokens"] == pytest.approx(per_problem.group_by("problem_id").agg(
        pl.col("tokens").sum())["tokens"].mean())  # all 8 plans read, the pool being 8 per problem
    assert first.method_reports["offshelf_rm"]["newly_scored"] == 72

    counted_scoring.clear()
    second = evaluate(root, settings)
    assert counted_scoring == [] and second.method_reports["offshelf_rm"]["newly_scored"] == 0
    assert [(r["method"], r["n"], r["accuracy"]) for r in first.rows] == [
        (r["method"], r["n"], r["accuracy"]) for r in second.rows]


def test_another_input_spec_is_another_cache_entry(evaluated_root, tiny_backbone, counted_scoring):
    root, _, _ = evaluated_root
    for max_length in (512, 64):
        evaluate(root, EvaluationSettings(methods=("offshelf_rm",), ns=(2,), offshelf_rm=OffShelfRMSettings(
            model=tiny_backbone, input_format="plan_text", max_length=max_length, device="cpu")))
    assert len(counted_scoring) == 144
    assert scan_table(root, "offshelf_scores").collect()["scorer_id"].n_unique() == 2


def test_a_missing_or_unfit_model_is_refused_naming_the_setting_and_the_path(evaluated_root, tmp_path):
    root, _, _ = evaluated_root
    missing = str(tmp_path / "no-such-model")
    with pytest.raises(ValueError, match=f"offshelf_rm.model: '{missing}' is neither a model folder"):
        evaluate(root, EvaluationSettings(methods=("offshelf_rm",), offshelf_rm=OffShelfRMSettings(model=missing)))
    from transformers import ViTConfig

    vision = tmp_path / "vision"
    ViTConfig().save_pretrained(vision)
    with pytest.raises(ValueError, match=f"offshelf_rm.model: {vision} is a vit model, which has no sequence"):
        evaluate(root, EvaluationSettings(methods=("offshelf_rm",), offshelf_rm=OffShelfRMSettings(model=str(vision))))


# ---------------------------------------------------------------- the ranking evaluator


def test_the_rank_is_the_share_of_pairwise_majority_wins_in_the_set():
    # evaluators: agreement, format, steps, length, repetition, similarity
    a = [1.0, 1.0, 1.0, 0.5, 0.9, 0.0]  # above b on 4 evaluators, below on 1: beats b; beats c
    b = [0.5, 0.0, 0.2, 0.9, 0.8, 0.0]
    c = [0.0, 0.0, 0.9, 0.1, 0.1, 0.0]  # above b on steps only, below on agreement, length, repetition: loses
    ranks = pairwise_rank(np.array([[a, b, c], [a, a, c]]))
    assert ranks[0].tolist() == [1.0, 0.5, 0.0]
    assert ranks[1].tolist() == [0.75, 0.75, 0.0]  # a draw counts half
    assert pairwise_rank(np.zeros((1, 1, 6))).tolist() == [[0.5]]


def test_the_rank_is_set_dependent():
    strong, middle, weak = [0.9] * 6, [0.5] * 6, [0.1] * 6
    assert pairwise_rank(np.array([[middle, weak]]))[0, 0] == 1.0
    assert pairwise_rank(np.array([[middle, strong]]))[0, 0] == 0.0


# ---------------------------------------------------------------- fitted fusion weights


def held_in_runs(count: int, seed: int = 0) -> pl.DataFrame:
    """Runs whose correctness `format` decides (with a little noise); every other partial score is noise."""
    rng = np.random.default_rng(seed)
    columns = {name: rng.random(count) for name in PANEL_EVALUATORS}
    correct = (columns["format"] + rng.normal(0, 0.1, count)) > 0.5
    return pl.DataFrame({**columns, "correct": correct})


def test_the_fitted_weights_put_their_weight_on_the_score_that_predicts_correctness():
    fit = fit_fusion(held_in_runs(400), min_runs=20)
    others = [abs(w) for name, w in fit.weights.items() if name != "format"]
    assert fit.weights["format"] > 3 * max(others)
    assert fit.runs == 400 and fit.accuracy > 0.85 and 0 < fit.correct < 400


def test_too_few_runs_or_one_outcome_fits_nothing():
    assert fit_fusion(held_in_runs(10), min_runs=20) is None
    assert fit_fusion(held_in_runs(100).with_columns(correct=pl.lit(True)), min_runs=20) is None


def flip_label(root, run_id: str) -> None:
    """Rewrites the labels partition holding run_id with its correctness flipped."""
    for batch_id in root.batch_ids("labels"):
        labels = pl.concat([pl.read_parquet(root.fs.open(part, "rb").read()) for part in root.batch_files("labels",
                                                                                                        batch_id)])
        if run_id in labels["run_id"].to_list():
            flipped = labels.with_columns(is_correct=pl.when(pl.col("run_id") == run_id)
                                          .then(~pl.col("is_correct")).otherwise(pl.col("is_correct")))
            with tempfile.TemporaryDirectory() as staging:
                path = str(Path(staging, "labels.parquet"))
                pq.write_table(flipped.to_arrow(), path)
                root.replace_batch("labels", batch_id, [path])


def test_the_weights_are_fitted_on_problems_the_reward_model_saw_only(evaluated_root):
    root, records, seen = evaluated_root
    settings = EvaluationSettings(methods=("collaborative_verifier",), ns=(2,), verifier=NO_SIMILARITY)
    fitted = evaluate(root, settings).method_reports["collaborative_verifier"]
    assert fitted["fitted"] and fitted["runs"] == 24
    held_out = next(r["run_id"] for r in records if r["problem_id"] not in seen)
    flip_label(root, held_out)
    assert evaluate(root, settings).method_reports["collaborative_verifier"] == fitted
    held_in = next(r["run_id"] for r in records if r["problem_id"] in seen)
    flip_label(root, held_in)
    assert evaluate(root, settings).method_reports["collaborative_verifier"] != fitted


def test_without_enough_held_in_runs_both_variants_fuse_by_the_fixed_weights(evaluated_root):
    root, _, _ = evaluated_root
    settings = EvaluationSettings(methods=PANEL, ns=(2, 4), max_enumerate=100,
                                  verifier=VerifierSettings(weights=VerifierWeights(similarity=0.0, rank=0.2),
                                                            min_fit_runs=1000))
    outcome = evaluate(root, settings)
    assert any("too few to fit" in note for note in outcome.notes)
    assert outcome.method_reports["collaborative_verifier"]["fitted"] is False
    rows = {(r["method"], r["n"]): r["accuracy"] for r in outcome.rows}
    assert all(rows[("collaborative_verifier", n)] == rows[("collaborative_verifier_fixed", n)] for n in (2, 4))


def test_the_fit_reads_the_runs_of_at_most_max_fit_problems_held_in_problems_whole():
    import polars as pl

    from orchrm_dagster.evaluation.methods.collaborative_verifier import fit_sample

    held_in = pl.DataFrame({"pkey": [k for k in range(10) for _ in range(3)], "run_id": [f"r{i}" for i in range(30)]})
    sampled = fit_sample(held_in, 4, seed=0)
    assert sampled["pkey"].n_unique() == 4 and sampled.height == 12  # every run of each chosen problem
    assert fit_sample(held_in, 4, seed=0).equals(sampled) and fit_sample(held_in, 10, seed=0).equals(held_in)
