"""How a reward model's score predicts a correct answer: a logistic fit of the correctness of runs it never trained on
(its validation problems' and those it never saw) on its score, P(correct | score) = sigmoid(intercept + slope x score). The policy gate turns each side's held-out scores into
the accuracy the reward model expects (`Calibration.accuracy`) and holds the measured accuracy against it
(`grpo.gate.hacking_suspected`): a score that rose for something that does not answer better shows as a predicted
gain the measurement does not reach."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from orchrm_dagster.storage import StorageRoot, scan_table

MIN_RUNS_OF_EACH = 10  # correct and incorrect runs a fit needs, at least, of each
CALIBRATION_RUNS = 512  # runs scored for a fit, at most (spread evenly over them)


@dataclass(frozen=True)
class Calibration:
    intercept: float
    slope: float
    runs: int  # runs it was fitted on (of problems it never trained on)
    correct: int  # of them, correct
    # the check before it is used: the cross-validated log loss of the fit on runs each fold never saw, and that of a
    # constant (each fold's base rate); None: a fit recorded before the check
    cv_log_loss: float | None = None
    constant_log_loss: float | None = None

    @property
    def trusted(self) -> bool:
        """The fit predicts correctness better than a constant on runs it never saw."""
        return (self.cv_log_loss is not None and self.constant_log_loss is not None
                and self.cv_log_loss < self.constant_log_loss)

    def untrusted_reason(self) -> str | None:
        """Why its predictions cannot be used (None: they can)."""
        if self.cv_log_loss is None or self.constant_log_loss is None:
            return "the calibration was fitted before calibrations were checked"
        if not self.trusted:
            return (f"the calibration is no better than a constant on runs it never saw (cross-validated log loss "
                    f"{self.cv_log_loss:.4f} against {self.constant_log_loss:.4f}; {self.runs} runs)")
        return None

    def probability(self, score: float) -> float:
        z = self.intercept + self.slope * score
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def accuracy(self, scores: Sequence[float]) -> float:
        """The accuracy the reward model predicts for plans with these scores."""
        return math.fsum(self.probability(s) for s in scores) / len(scores)

    def text(self) -> str:
        checked = (f"; cross-validated log loss {self.cv_log_loss:.4f} against a constant's "
                   f"{self.constant_log_loss:.4f}" if self.cv_log_loss is not None and self.constant_log_loss is not None
                   else "")
        return (f"P(correct) = sigmoid({self.intercept:+.3f} {self.slope:+.3f} x score), fitted on {self.runs} "
                f"runs it never trained on ({self.correct} correct){checked}")

    def to_json(self) -> str:
        """What `grpo_rounds.calibration` holds (`from_json` reads it back)."""
        import json

        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        import json

        return cls(**json.loads(text))


def fit_calibration(scores: Sequence[float], correct: Sequence[bool]) -> Calibration | None:
    """The logistic fit of `correct` on `scores` (None: fewer than MIN_RUNS_OF_EACH correct or incorrect runs, or
    scores that do not vary: nothing to fit)."""
    right = sum(bool(c) for c in correct)
    if min(right, len(correct) - right) < MIN_RUNS_OF_EACH or len(set(scores)) < 2:
        return None
    import numpy as np

    x, y = np.asarray(scores, float).reshape(-1, 1), np.asarray(correct, bool)
    fit = _logistic().fit(x, y)
    cv, constant = _checked(x, y)
    return Calibration(float(fit.intercept_[0]), float(fit.coef_[0, 0]), len(correct), right, cv, constant)


CHECK_FOLDS = 5


def _logistic():
    from sklearn.linear_model import LogisticRegression

    # all but unpenalized: the slope keeps the score's own scale, and separable data still converge
    return LogisticRegression(C=1e4, max_iter=1000)


def _checked(x, y) -> tuple[float, float]:
    """The fit's log loss on runs each of CHECK_FOLDS folds never saw (stratified, fixed seed), and a constant's (the
    fold's base rate): a fit no better than the constant cannot say how accuracy moves with the score."""
    import numpy as np
    from sklearn.metrics import log_loss
    from sklearn.model_selection import StratifiedKFold

    fitted, constant = np.empty(len(y)), np.empty(len(y))
    for train, test in StratifiedKFold(CHECK_FOLDS, shuffle=True, random_state=0).split(x, y):
        fitted[test] = _logistic().fit(x[train], y[train]).predict_proba(x[test])[:, 1]
        constant[test] = y[train].mean()
    return float(log_loss(y, fitted, labels=[False, True])), float(log_loss(y, constant, labels=[False, True]))


def calibration_runs(root: StorageRoot, version: int, domain: str, limit: int = CALIBRATION_RUNS) -> pl.DataFrame:
    """question, plan and correct of the labeled runs of `domain` on problems `version` never trained on (its
    validation problems, and those it never saw), at most `limit` of them spread evenly in run_id order; empty for a
    version trained before its pairs were saved beside it."""
    from orchrm_dagster.contract import RM_TRAINING_PAIRS_FILE
    from orchrm_dagster.pairs import TRAIN
    from orchrm_dagster.rm.checkpoints import rm_store
    from orchrm_dagster.rm.domains import domain_of

    empty = pl.DataFrame(schema={"question": pl.String, "plan": pl.String, "correct": pl.Boolean})
    try:
        saved = pl.read_parquet(rm_store(root).fetch_file(version, RM_TRAINING_PAIRS_FILE))
    except FileNotFoundError:
        return empty
    trained = saved.filter(pl.col("split") == TRAIN).select("problem_id").unique()
    labels = (scan_table(root, "labels").filter(pl.col("is_correct").is_not_null())
              .group_by("run_id").agg(pl.col("is_correct").first().alias("correct")))
    runs = scan_table(root, "runs").select("run_id", "benchmark", "problem_id", "question", "plan")
    benchmarks = runs.select("benchmark").unique().collect()["benchmark"].drop_nulls().to_list()
    of_domain = [b for b in benchmarks if domain_of(b) == domain]
    found = (runs.filter(pl.col("benchmark").is_in(of_domain))
             .join(trained.lazy(), on="problem_id", how="anti").join(labels, on="run_id")
             .unique(subset="run_id", keep="first").sort("run_id").collect())
    if found.is_empty():
        return empty
    step = max(1, math.ceil(found.height / limit))
    return found.gather_every(step).select("question", "plan", "correct")


def champion_calibration(root: StorageRoot, version: int, domain: str, scorer) -> tuple[Calibration | None, int]:
    """`version`'s calibration on the runs of `domain` it never trained on, scored now by `scorer` (that version's),
    and the tokens the scorer read for it."""
    runs = calibration_runs(root, version, domain)
    if runs.is_empty():
        return None, 0
    scores, lengths = scorer.score_with_lengths(runs["question"].to_list(), runs["plan"].to_list())
    finite = [(s, c) for s, c in zip(scores, runs["correct"].to_list()) if math.isfinite(s)]
    return fit_calibration([s for s, _ in finite], [c for _, c in finite]), sum(lengths)
