"""`collaborative_verifier`: the run a panel of evaluators scores highest, their partial scores fused by weights fitted
on labeled runs the reward model also saw (CRM's adaptive aggregator); `collaborative_verifier_fixed` fuses them by
the configured weights instead.

The panel (orchrm_dagster/evaluation/verifier.py): per-run evaluators (format, steps, length, repetition, similarity),
cached in `verifier_scores`; `agreement`, the share of the set's other runs with the same answer; and `rank`, the
ranking evaluator, the share of pairwise comparisons with the set's other runs that a run wins. The fit is a logistic
regression of correctness on the partial scores of the held-in runs (problems of the reward model's pairs, never a
held-out one), each partial score computed against the run's whole pool there; its coefficients are the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from orchrm_dagster.contract import VERIFIER_SCORES
from orchrm_dagster.evaluation.methods import EvaluationMethod, MethodKind, Preparation, register_method
from orchrm_dagster.evaluation.methods.common import per_problem
from orchrm_dagster.evaluation.pools import candidate_pool, run_texts, trajectories
from orchrm_dagster.evaluation.settings import EvaluationSettings, VerifierSettings, VerifierWeights
from orchrm_dagster.evaluation.verifier import (COMPARED_EVALUATORS, PANEL_EVALUATORS, STATIC_EVALUATORS,
                                                MiniLMEmbedder, pairwise_rank, static_scores)
from orchrm_dagster.storage import scan_table

NAME = "collaborative_verifier"


# ---------------------------------------------------------------- choosing within a candidate set


def panel_choice(members: pl.DataFrame, n: int, static: pl.Expr, agreement_weight: pl.Expr | float,
                 rank_weight: pl.Expr | float) -> pl.DataFrame:
    """The highest fused panel score of each set: the run's static part (`static`) plus the weighted agreement and
    rank within its set; ties go to the lower slot. Every run of the set is executed and read by the panel."""
    counts = members.filter(pl.col("vote").is_not_null()).group_by("pkey", "set_id", "vote").agg(same=pl.len())
    scored = (members.join(counts, on=["pkey", "set_id", "vote"], how="left").sort("pkey", "set_id", "slot")
              .with_columns(agreement=((pl.col("same").fill_null(1) - 1) / max(n - 1, 1)).cast(pl.Float64)))
    if isinstance(rank_weight, float | int) and rank_weight == 0:
        scored = scored.with_columns(rank=pl.lit(0.0))  # the fixed default: no comparisons to compute
    else:
        partials = scored.select(COMPARED_EVALUATORS).fill_null(0.0).to_numpy()
        scored = scored.with_columns(rank=pl.Series(pairwise_rank(
            partials.reshape(-1, n, len(COMPARED_EVALUATORS))).reshape(-1)))
    scored = scored.with_columns(total=static + agreement_weight * pl.col("agreement") + rank_weight * pl.col("rank"))
    chosen = (scored.sort(["pkey", "set_id", "total", "slot"], descending=[False, False, True, False])
              .unique(subset=["pkey", "set_id"], keep="first", maintain_order=True))
    return per_problem(chosen, members, n, pl.col("verifier_tokens").cast(pl.Float64).mean() * n)


def fixed_static(weights: VerifierWeights) -> pl.Expr:
    return sum((pl.col(name) * getattr(weights, name) for name in STATIC_EVALUATORS), pl.lit(0.0))


def choose(members: pl.DataFrame, n: int, settings: EvaluationSettings) -> pl.DataFrame:
    return panel_choice(members, n, pl.col("fitted_static"), pl.col("fitted_agreement"), pl.col("fitted_rank"))


# ---------------------------------------------------------------- the panel's per-run scores


def prepare_panel(preparation: Preparation) -> None:
    """Adds each run's static partial scores, their fixed-weight sum (`verifier_static`) and the panel's tokens
    (`verifier_tokens`) to the pool; partial scores computed by earlier evaluations are reused. Leaves the pool's
    rows for `verifier_scores` (agreement and rank against the run's whole pool)."""
    if "verifier_static" in preparation.pool.columns:
        return  # prepared already (both variants chosen)
    verifier = preparation.settings.verifier
    pool = with_comparisons(preparation.pool.join(panel_partials(preparation.root, preparation.pool, verifier),
                                                  on="run_id", how="left"))
    pool = pool.with_columns(verifier_static=fixed_static(verifier.weights),
                             verifier_tokens=pl.col("tokens").fill_null(0)).drop("tokens")
    preparation.tables["verifier_scores"] = _rows(pool, preparation.evaluation_id, verifier.weights, held_in=False)
    preparation.pool = pool.drop("agreement", "rank")  # within a candidate set they are the set's own


def panel_partials(root, runs: pl.DataFrame, verifier: VerifierSettings) -> pl.DataFrame:
    """run_id, the static partial scores and the embedding tokens of `runs`: those cached in `verifier_scores`, the
    others computed now."""
    cached = (scan_table(root, "verifier_scores").select("run_id", *STATIC_EVALUATORS, "tokens")
              .drop_nulls(STATIC_EVALUATORS).join(runs.select("run_id").lazy(), on="run_id", how="semi")
              .unique(subset="run_id", keep="last").collect())
    missing = runs.select("run_id").unique().join(cached, on="run_id", how="anti")
    if not missing.height:
        return cached
    texts = run_texts(root, missing["run_id"].to_list())
    run_ids = texts["run_id"].to_list()
    work = trajectories(root, run_ids, dict(zip(run_ids, texts["final_answer"].to_list())))
    embedder = None
    if verifier.weights.similarity > 0:
        from orchrm_dagster.rm import backbone_path

        embedder = MiniLMEmbedder(verifier.similarity_model or backbone_path(None), verifier.device,
                                  verifier.max_length)
    scores = static_scores(texts["question"].to_list(), texts["final_answer"].to_list(), [work[r] for r in run_ids],
                           verifier, embedder)
    fresh = pl.DataFrame({"run_id": run_ids, **{name: getattr(scores, name) for name in (*STATIC_EVALUATORS, "tokens")}},
                         schema_overrides={"tokens": pl.Int64})
    return pl.concat([cached, fresh], how="vertical_relaxed")


def with_comparisons(pool: pl.DataFrame) -> pl.DataFrame:
    """`agreement` and `rank` of each run against the rest of its whole pool (pkey), as a candidate set of all M."""
    others = (pl.col("m") - 1).clip(lower_bound=1)
    pool = pool.with_columns(agreement=pl.when(pl.col("answer").is_not_null())
                             .then((pl.len().over("pkey", "answer") - 1) / others).otherwise(0.0).cast(pl.Float64))
    ordered = pool.sort("m", "pkey", "idx")
    ranks = [pairwise_rank(group.select(COMPARED_EVALUATORS).fill_null(0.0).to_numpy()
                           .reshape(-1, m, len(COMPARED_EVALUATORS))).reshape(-1)
             for (m,), group in ordered.group_by("m", maintain_order=True)]
    ranked = ordered.with_columns(rank=pl.Series(np.concatenate(ranks) if ranks else [], dtype=pl.Float64))
    return ranked.sort("pkey", "idx")


def _rows(pool: pl.DataFrame, evaluation_id: str, weights: VerifierWeights, held_in: bool) -> pl.DataFrame:
    fused = pl.col("verifier_static") + weights.agreement * pl.col("agreement") + weights.rank * pl.col("rank")
    return pool.select(
        "run_id", "problem_id", *PANEL_EVALUATORS, evaluation_id=pl.lit(evaluation_id), fused=fused,
        tokens=pl.col("verifier_tokens"), fitted=pl.lit(None, dtype=pl.Float64), held_in=pl.lit(held_in),
    ).select(VERIFIER_SCORES.names)


# ---------------------------------------------------------------- adaptive fusion


@dataclass(frozen=True)
class FusionFit:
    """The fusion weights a logistic regression of correctness on the partial scores found, and how it fared."""

    weights: dict[str, float]  # one per PANEL_EVALUATORS
    intercept: float
    runs: int  # held-in runs fitted on
    correct: int
    accuracy: float  # on those same runs (held-in): its outcome predicted right

    def summary(self) -> str:
        weights = ", ".join(f"{name} {value:+.3f}" for name, value in self.weights.items())
        return (f"{NAME}: fusion weights fitted on {self.runs} labeled runs of problems the reward model saw "
                f"({self.correct} correct; held-in accuracy {self.accuracy:.3f}): {weights}, intercept "
                f"{self.intercept:+.3f}")

    def report(self) -> dict:
        return {"fitted": True, "runs": self.runs, "correct": self.correct, "held_in_accuracy": self.accuracy,
                "intercept": self.intercept, **{f"weight_{name}": value for name, value in self.weights.items()}}


def fit_fusion(held_in: pl.DataFrame, min_runs: int) -> FusionFit | None:
    """Logistic regression of `correct` on PANEL_EVALUATORS over the held-in runs (scikit-learn, L2 with C = 1: the
    partial scores lie in [0, 1], and the penalty keeps a score that never varies at weight 0). None with fewer
    than `min_runs` runs or a single outcome among them."""
    from sklearn.linear_model import LogisticRegression

    correct = held_in["correct"].cast(pl.Int8).to_numpy() if held_in.height else np.zeros(0)
    if len(correct) < max(min_runs, 2) or correct.min() == correct.max():
        return None
    features = held_in.select(PANEL_EVALUATORS).fill_null(0.0).to_numpy()
    model = LogisticRegression().fit(features, correct)
    return FusionFit(weights=dict(zip(PANEL_EVALUATORS, model.coef_[0].tolist())),
                     intercept=float(model.intercept_[0]), runs=len(correct), correct=int(correct.sum()),
                     accuracy=float(model.score(features, correct)))


def fit_sample(held_in: pl.DataFrame, max_problems: int, seed: int) -> pl.DataFrame:
    """The runs of at most `max_problems` of the held-in problems, drawn with `seed` (all of them when fewer)."""
    keys = held_in["pkey"].unique().sort()
    if keys.len() <= max_problems:
        return held_in
    chosen = keys.sample(max_problems, seed=seed)
    return held_in.filter(pl.col("pkey").is_in(chosen.to_list()))


def prepare_fitted_panel(preparation: Preparation) -> None:
    """The panel's scores (`prepare_panel`), and the fusion weights fitted on the held-in runs as per-run columns:
    `fitted_static` (the weighted static scores), `fitted_agreement` and `fitted_rank` (the set-dependent scores'
    weights). Too few held-in runs, or one outcome only: the fixed weights, with a note."""
    prepare_panel(preparation)
    verifier = preparation.settings.verifier
    held_in = candidate_pool(preparation.root, preparation.settings, preparation.champions, preparation.seen,
                             held_out=False)
    held_in = fit_sample(held_in, verifier.max_fit_problems, preparation.settings.seed)
    if held_in.height:
        held_in = with_comparisons(held_in.join(panel_partials(preparation.root, held_in, verifier), on="run_id",
                                                how="left"))
    fit = fit_fusion(held_in, verifier.min_fit_runs)
    if fit is None:
        correct = int(held_in["correct"].sum()) if held_in.height else 0
        preparation.notes.append(
            f"{NAME}: {held_in.height} labeled runs of problems the reward model saw ({correct} correct), too few "
            f"to fit the fusion weights (min_fit_runs={verifier.min_fit_runs}, both outcomes needed): the fixed "
            f"weights fuse instead")
        preparation.reports[NAME] = {"fitted": False, "runs": held_in.height, "correct": correct}
        weights = {name: getattr(verifier.weights, name) for name in PANEL_EVALUATORS}
    else:
        preparation.notes.append(fit.summary())
        preparation.reports[NAME] = fit.report()
        weights = fit.weights
        preparation.tables["verifier_scores"] = _with_fitted(preparation, held_in, fit)
    static = sum((pl.col(name) * weights[name] for name in STATIC_EVALUATORS), pl.lit(0.0))
    preparation.pool = preparation.pool.with_columns(fitted_static=static, fitted_agreement=pl.lit(weights["agreement"]),
                                                     fitted_rank=pl.lit(weights["rank"]))


def _with_fitted(preparation: Preparation, held_in: pl.DataFrame, fit: FusionFit) -> pl.DataFrame:
    """The evaluated runs' `verifier_scores` rows and the held-in runs', each with its fitted logit."""
    weights = preparation.settings.verifier.weights
    held_in = held_in.with_columns(verifier_static=fixed_static(weights), verifier_tokens=pl.col("tokens").fill_null(0))
    rows = pl.concat([preparation.tables["verifier_scores"],
                      _rows(held_in, preparation.evaluation_id, weights, held_in=True)])
    logit = sum((pl.col(name) * fit.weights[name] for name in PANEL_EVALUATORS), pl.lit(fit.intercept))
    return rows.with_columns(fitted=logit)


COLLABORATIVE_VERIFIER = register_method(EvaluationMethod(
    name=NAME, description="the best score of a panel of evaluators, fused by weights fitted on held-in runs",
    kind=MethodKind.CANDIDATE_SET, choose=choose, executes_all=True, prepare=prepare_fitted_panel))
