"""The policy gate decides on measured held-out accuracy, with its intervals, and never on the reward alone unless a
config asks for it; a side whose plans failed is no measurement; reward hacking is judged against what the champion's
own calibration predicts."""

import pytest

from orchrm_dagster.grpo import Accuracy, GateRule, Measured, Reward, accuracy_difference, policy_gate
from orchrm_dagster.grpo.gate import PROMOTED, REJECTED, UNDECIDED, UNVERIFIED

RULE = GateRule()  # accuracy gate, margin 0.05, 95%, reward margin 0, no failed plan, hacking below half the prediction


def reward(mean: float, std: float = 1.0, plans: int = 128) -> Reward:
    return Reward(mean, std, plans)


def side(mean: float, accuracy: Accuracy | None, std: float = 1.0, predicted: float | None = None, failed: int = 0,
         failure: str | None = None) -> Measured:
    return Measured(reward(mean, std, accuracy.plans if accuracy else 128), accuracy, failed, failure, predicted)


def gate(before_reward, after_reward, before, after, rule=RULE, predicted=(None, None)):
    """The gate on two sides given as (reward, accuracy), each with its predicted accuracy."""
    return policy_gate(Measured(before_reward, before, predicted=predicted[0]),
                       Measured(after_reward, after, predicted=predicted[1]), rule)


def test_intervals_match_published_values_on_known_counts():
    # Newcombe (1998), Statistics in Medicine 17:857-872: Wilson score interval of 81/263 is 0.2553 to 0.3662,
    # and the hybrid score interval (method 10) of 56/70 - 48/80 is 0.0524 to 0.3339
    assert Accuracy(81, 263).interval(0.95) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert accuracy_difference(Accuracy(56, 70), Accuracy(48, 80), 0.95) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert Accuracy(0, 10).interval(0.95)[0] == pytest.approx(0.0) and Accuracy(10, 10).interval(0.95)[1] == pytest.approx(1.0)


def test_reward_up_and_accuracy_down_is_rejected():
    verdict = gate(reward(0.0), reward(0.2), Accuracy(80, 128), Accuracy(40, 128), RULE)
    assert verdict.verdict == REJECTED and not verdict.promoted and "fell" in verdict.reason
    assert verdict.difference[1] < -0.05 and "40/128" in verdict.reason and "80/128" in verdict.reason


def test_a_rise_the_calibration_predicts_and_the_measurement_misses_is_suspected_reward_hacking():
    # the champion's scores predict 0.20 -> 0.60; executed, accuracy stayed at 0.16 -> 0.12
    hack = gate(reward(-0.24, std=0.05), reward(-0.09, std=0.05), Accuracy(20, 128), Accuracy(15, 128),
                predicted=(0.20, 0.60))
    assert hack.verdict == REJECTED and hack.reward_hacking and "suspected reward hacking" in hack.reason
    assert hack.predicted_gain == pytest.approx(0.40) and "+0.400" in hack.reason
    assert hack.difference[1] < 0.5 * 0.40  # the measured gain's upper bound, well below the prediction


def test_an_honest_small_gain_is_not_flagged_whatever_the_reward_rose_in_deviations():
    # the old rule fired on this: reward up 0.5 sd (0.026 over a per-plan sd of 0.054), accuracy interval reaching 0;
    # the calibration predicts the small gain the measurement shows
    honest = gate(reward(-0.090, std=0.054), reward(-0.064, std=0.054), Accuracy(98, 128), Accuracy(106, 128),
                  predicted=(0.74, 0.77))
    assert not honest.reward_hacking and honest.verdict == PROMOTED
    big = gate(reward(-0.24, std=0.05), reward(-0.09, std=0.05), Accuracy(26, 128), Accuracy(98, 128),
               predicted=(0.20, 0.90))
    assert big.promoted and not big.reward_hacking  # it rose less than predicted, but not well below it


def test_without_a_calibration_or_a_predicted_gain_worth_measuring_nothing_is_suspected():
    flat = (reward(0.0, std=0.4), reward(1.0, std=0.4), Accuracy(20, 128), Accuracy(23, 128))
    assert not gate(*flat).reward_hacking  # no calibration: nothing predicted
    assert not gate(*flat, predicted=(0.20, 0.23)).reward_hacking  # a 3-point prediction is below the margin


def test_an_accuracy_within_the_margin_is_promoted_and_a_small_sample_is_undecided():
    big = gate(reward(0.0), reward(0.01), Accuracy(3000, 4000), Accuracy(2990, 4000), RULE)
    assert big.verdict == PROMOTED and big.difference[0] > -0.05  # a 0.25-point dip, well inside the margin
    small = gate(reward(0.0), reward(0.01), Accuracy(3, 6), Accuracy(3, 6), RULE)
    assert small.verdict == UNDECIDED and not small.promoted
    assert small.reason.startswith("undecided: 6 + 6 plans, interval [")
    low, high = small.difference
    assert f"[{low:+.3f}, {high:+.3f}]" in small.reason


def test_a_fallen_reward_rejects_a_checkpoint_whose_accuracy_held():
    verdict = gate(reward(0.5), reward(0.2), Accuracy(90, 128), Accuracy(100, 128),
                          GateRule(reward_margin=0.1))
    assert verdict.verdict == REJECTED and "reward" in verdict.reason and "fell" in verdict.reason
    assert gate(reward(0.5), reward(0.45), Accuracy(90, 128), Accuracy(100, 128),
                       GateRule(reward_margin=0.1)).promoted


def test_without_measured_accuracy_a_checkpoint_is_unverified_unless_a_reward_only_gate_is_asked_for():
    unverified = gate(reward(0.0), reward(2.0), None, None, RULE)
    assert unverified.verdict == UNVERIFIED and not unverified.promoted and "reward_only" in unverified.reason
    reward_only = GateRule(gate="reward_only")
    assert gate(reward(0.0), reward(2.0), None, None, reward_only).promoted
    fell = gate(reward(0.0), reward(-1.0), None, None, reward_only)
    assert fell.verdict == REJECTED and fell.gate == "reward_only"
    # measured accuracy is tested whatever the gate: a reward-only config cannot promote a fall
    measured = gate(reward(0.0), reward(0.1), Accuracy(90, 128), Accuracy(30, 128), reward_only)
    assert measured.verdict == REJECTED and measured.gate == "accuracy"


def test_a_policy_whose_plans_never_parse_is_rejected_without_an_infinite_reward():
    nothing = Reward.unparseable(128)
    verdict = policy_gate(Measured(reward(0.0), Accuracy(60, 128)), Measured(nothing, Accuracy(0, 128)), RULE)
    assert verdict.verdict == REJECTED and "parses" in verdict.reason and not verdict.promoted
    with pytest.raises(ValueError, match="finite"):
        Reward.of([float("-inf")] * 4)
    with pytest.raises(ValueError, match="finite"):
        Reward.of([0.1, float("nan")])
    # a starting policy that never parsed: the reward cannot fall, the accuracy decides
    rose = policy_gate(Measured(Reward.unparseable(128), Accuracy(0, 128)), Measured(reward(0.1), Accuracy(60, 128)),
                       RULE)
    assert rose.promoted


@pytest.mark.parametrize("failed_side", ["before", "after", "both"])
def test_a_side_whose_plans_failed_is_no_measurement_the_round_is_unverified(failed_side):
    # 0/128 vs 0/128 on both sides "not worse" was promoted before: failed decodes counted as incorrect plans
    failed = Measured(Reward.unparseable(0), None, 128, "generation failed: CUDA out of memory")
    good = side(0.0, Accuracy(60, 128))
    before, after = {"before": (failed, good), "after": (good, failed), "both": (failed, failed)}[failed_side]
    verdict = policy_gate(before, after, RULE)
    assert verdict.verdict == UNVERIFIED and not verdict.promoted and not verdict.reward_hacking
    assert "out of memory" in verdict.reason and "128 of 128" in verdict.reason


def test_failed_plans_up_to_the_threshold_still_measure():
    some = side(0.0, Accuracy(30, 126), failed=2, failure="timeout")
    assert policy_gate(some, side(0.0, Accuracy(90, 128)), GateRule(max_failed=2)).verdict == PROMOTED
    assert policy_gate(some, side(0.0, Accuracy(90, 128)), GateRule(max_failed=1)).verdict == UNVERIFIED


def test_reward_intervals_are_students_t():
    from scipy.stats import t

    values = [0.1, 0.4, 0.2, 0.9, 0.5]
    measured = Reward.of(values)
    import statistics

    half = t.ppf(0.975, 4) * statistics.stdev(values) / 5 ** 0.5
    assert measured.interval(0.95) == pytest.approx((statistics.mean(values) - half, statistics.mean(values) + half))
    assert Reward.of([0.3]).interval(0.95) == (0.3, 0.3)


def test_by_default_the_reward_the_round_optimized_vetoes_nothing_the_accuracy_decides():
    # the loop's round 3 (2026-12-03): reward 0.0372 -> 0.0360, accuracy 111/128 -> 111/128, was rejected on the fall
    fell = gate(reward(0.0372, std=0.05), reward(0.0360, std=0.05), Accuracy(111, 128), Accuracy(111, 128))
    assert fell.verdict == UNDECIDED and "fell" not in fell.reason  # 128 plans cannot show it held within 5 points
    assert gate(reward(0.5), reward(0.2), Accuracy(30, 128), Accuracy(90, 128)).promoted
    # where nothing was measured, the reward-only gate still refuses a fall
    assert gate(reward(0.5), reward(0.2), None, None, GateRule(gate="reward_only")).verdict == REJECTED
