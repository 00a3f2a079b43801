"""Pairwise validation metrics of a reward model."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
from scipy.special import expit
from scipy.stats import spearmanr

ECE_BINS = 10


def pairwise_metrics(chosen_scores: Sequence[float], rejected_scores: Sequence[float], sources: Sequence[str],
                     chosen_lengths: Sequence[int], rejected_lengths: Sequence[int]) -> dict:
    """Metrics of scores on validation pairs (pair i: chosen i should outscore rejected i).

    - val_accuracy: share of pairs with r_w > r_l strictly; a tie counts as wrong.
    - accuracy_by_source: the same per pair source.
    - ece: see `expected_calibration_error`.
    - length_spearman: Spearman correlation between score and plan length in tokens over every scored plan (chosen
      and rejected together); near 0 means no length bias. None when undefined (constant scores or lengths).
    - n_pairs.
    """
    chosen, rejected = np.asarray(chosen_scores, float), np.asarray(rejected_scores, float)
    if not (len(chosen) == len(rejected) == len(sources) == len(chosen_lengths) == len(rejected_lengths)):
        raise ValueError("pairwise_metrics needs equal-length inputs")
    if len(chosen) == 0:
        raise ValueError("pairwise_metrics needs at least one pair")
    wins = chosen > rejected
    return {
        "val_accuracy": float(wins.mean()),
        "accuracy_by_source": _accuracy_by_source(wins, sources),
        "ece": expected_calibration_error(chosen - rejected),
        "length_spearman": _spearman(np.concatenate([chosen, rejected]),
                                     np.concatenate([chosen_lengths, rejected_lengths])),
        "n_pairs": len(chosen),
    }


def expected_calibration_error(margins: Sequence[float], bins: int = ECE_BINS) -> float:
    """ECE of the Bradley-Terry probability p = sigmoid(r_w - r_l) that the chosen plan wins (it always does).

    The model's prediction for a pair is the side it favours: confidence = max(p, 1 - p), correct = (p > 0.5)
    (p == 0.5 is a tie, wrong). Confidences lie in [0.5, 1]; they are put into `bins` equal-width bins over that
    range ([0.5, 0.55], (0.55, 0.6], ..., (0.95, 1]) and
        ECE = sum over bins b of (n_b / n) * |accuracy_b - mean confidence_b|.
    0 is perfectly calibrated; a model that is 99% sure and right half the time scores about 0.49.
    """
    p = expit(np.asarray(margins, float))
    confidence = np.maximum(p, 1.0 - p)
    correct = p > 0.5
    inner_edges = np.linspace(0.5, 1.0, bins + 1)[1:-1]
    bin_of = np.searchsorted(inner_edges, confidence, side="left")
    ece = 0.0
    for b in np.unique(bin_of):
        members = bin_of == b
        ece += members.mean() * abs(correct[members].mean() - confidence[members].mean())
    return float(ece)


def _accuracy_by_source(wins: np.ndarray, sources: Sequence[str]) -> dict[str, float]:
    by_source: dict[str, list[bool]] = defaultdict(list)
    for win, source in zip(wins, sources):
        by_source[source].append(bool(win))
    return {source: sum(v) / len(v) for source, v in sorted(by_source.items())}


def _spearman(scores: np.ndarray, lengths: np.ndarray) -> float | None:
    if np.ptp(scores) == 0 or np.ptp(lengths) == 0:
        return None
    return float(spearmanr(scores, lengths).statistic)
