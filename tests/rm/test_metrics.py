import math

import pytest

from orchrm_dagster.rm.metrics import expected_calibration_error, pairwise_metrics


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def test_accuracy_is_strict_and_ties_count_as_wrong():
    metrics = pairwise_metrics([2.0, 1.0, 0.5, 3.0], [1.0, 1.0, 0.7, -1.0], ["a"] * 4, [1, 2, 3, 4], [1, 2, 3, 4])
    assert metrics["val_accuracy"] == 0.5
    assert metrics["n_pairs"] == 4


def test_accuracy_by_source():
    metrics = pairwise_metrics([1, 1, 0, 1], [0, 0, 1, 0], ["base", "base", "correct", "correct"],
                               [1, 2, 3, 4], [5, 6, 7, 8])
    assert metrics["accuracy_by_source"] == {"base": 1.0, "correct": 0.5}


def test_ece_of_a_calibrated_model_is_zero():
    # Ten pairs at confidence 0.8 of which eight are right: accuracy equals confidence.
    margins = [_logit(0.8)] * 8 + [-_logit(0.8)] * 2
    assert expected_calibration_error(margins) == pytest.approx(0.0, abs=1e-9)


def test_ece_of_an_overconfident_model_is_large():
    margins = [_logit(0.99)] * 5 + [-_logit(0.99)] * 5  # 99% sure, right half the time
    assert expected_calibration_error(margins) > 0.3


def test_a_tie_is_a_wrong_prediction_at_confidence_one_half():
    assert expected_calibration_error([0.0, 0.0]) == pytest.approx(0.5)


def test_length_spearman_sign():
    lengths = [10, 20, 30, 40]
    favours_long = pairwise_metrics([4.0, 3.0], [2.0, 1.0], ["a", "a"], [40, 30], [20, 10])
    favours_short = pairwise_metrics([1.0, 2.0], [3.0, 4.0], ["a", "a"], lengths[2:], lengths[:2][::-1])
    assert favours_long["length_spearman"] == pytest.approx(1.0)
    assert favours_short["length_spearman"] < 0


def test_length_spearman_is_none_when_undefined():
    assert pairwise_metrics([1.0], [0.0], ["a"], [7], [7])["length_spearman"] is None


def test_mismatched_or_empty_inputs_are_rejected():
    with pytest.raises(ValueError):
        pairwise_metrics([1.0], [0.0, 1.0], ["a"], [1], [1])
    with pytest.raises(ValueError):
        pairwise_metrics([], [], [], [], [])
