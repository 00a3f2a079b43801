"""The policy gate decides on measured held-out accuracy, with its intervals, and never on the reward alone unless a
config asks for it."""

import pytest

from orchrm_dagster.grpo import Accuracy, GateRule, Reward, accuracy_difference, policy_gate
from orchrm_dagster.grpo.gate import PROMOTED, REJECTED, UNDECIDED, UNVERIFIED

RULE = GateRule()  # accuracy gate, margin 0.05, 95%, reward margin 0, hacking at 0.5 sd


def reward(mean: float, std: float = 1.0, plans: int = 128) -> Reward:
    return Reward(mean, std, plans)


def test_intervals_match_published_values_on_known_counts():
    # Newcombe (1998), Statistics in Medicine 17:857-872: Wilson score interval of 81/263 is 0.2553 to 0.3662,
    # and the hybrid score interval (method 10) of 56/70 - 48/80 is 0.0524 to 0.3339
    assert Accuracy(81, 263).interval(0.95) == pytest.approx((0.2553, 0.3662), abs=1e-4)
    assert accuracy_difference(Accuracy(56, 70), Accuracy(48, 80), 0.95) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    assert Accuracy(0, 10).interval(0.95)[0] == pytest.approx(0.0) and Accuracy(10, 10).interval(0.95)[1] == pytest.approx(1.0)


def test_reward_up_and_accuracy_down_is_rejected():
    verdict = policy_gate(reward(0.0), reward(0.2), Accuracy(80, 128), Accuracy(40, 128), RULE)
    assert verdict.verdict == REJECTED and not verdict.promoted and "fell" in verdict.reason
    assert verdict.difference[1] < -0.05 and "40/128" in verdict.reason and "80/128" in verdict.reason


def test_a_reward_that_rose_far_while_accuracy_did_not_is_suspected_reward_hacking():
    verdict = policy_gate(reward(0.0, std=0.4), reward(1.0, std=0.4), Accuracy(64, 128), Accuracy(60, 128), RULE)
    assert verdict.verdict == REJECTED and verdict.reward_hacking and "suspected reward hacking" in verdict.reason
    honest = policy_gate(reward(0.0, std=0.4), reward(1.0, std=0.4), Accuracy(40, 128), Accuracy(90, 128), RULE)
    assert honest.promoted and not honest.reward_hacking  # reward and accuracy rose together


def test_an_accuracy_a_little_up_by_chance_is_no_rise_for_a_reward_that_rose_far():
    # reward up 2.5 sd; accuracy 20/128 -> 23/128, well inside what chance gives at 128 plans a side
    flat = policy_gate(reward(0.0, std=0.4), reward(1.0, std=0.4), Accuracy(20, 128), Accuracy(23, 128), RULE)
    assert flat.reward_hacking and flat.verdict == REJECTED and flat.difference[0] <= 0 <= flat.difference[1]
    assert "did not rise (the interval reaches 0)" in flat.reason
    quiet = policy_gate(reward(0.0, std=0.4), reward(0.1, std=0.4), Accuracy(20, 128), Accuracy(23, 128), RULE)
    assert not quiet.reward_hacking  # the reward barely moved: nothing to suspect


def test_an_accuracy_within_the_margin_is_promoted_and_a_small_sample_is_undecided():
    big = policy_gate(reward(0.0), reward(0.01), Accuracy(3000, 4000), Accuracy(2990, 4000), RULE)
    assert big.verdict == PROMOTED and big.difference[0] > -0.05  # a 0.25-point dip, well inside the margin
    small = policy_gate(reward(0.0), reward(0.01), Accuracy(3, 6), Accuracy(3, 6), RULE)
    assert small.verdict == UNDECIDED and not small.promoted
    assert small.reason.startswith("undecided: 6 + 6 plans, interval [")
    low, high = small.difference
    assert f"[{low:+.3f}, {high:+.3f}]" in small.reason


def test_a_fallen_reward_rejects_a_checkpoint_whose_accuracy_held():
    verdict = policy_gate(reward(0.5), reward(0.2), Accuracy(90, 128), Accuracy(100, 128),
                          GateRule(reward_margin=0.1))
    assert verdict.verdict == REJECTED and "reward" in verdict.reason and "fell" in verdict.reason
    assert policy_gate(reward(0.5), reward(0.45), Accuracy(90, 128), Accuracy(100, 128),
                       GateRule(reward_margin=0.1)).promoted


def test_without_measured_accuracy_a_checkpoint_is_unverified_unless_a_reward_only_gate_is_asked_for():
    unverified = policy_gate(reward(0.0), reward(2.0), None, None, RULE)
    assert unverified.verdict == UNVERIFIED and not unverified.promoted and "reward_only" in unverified.reason
    reward_only = GateRule(gate="reward_only")
    assert policy_gate(reward(0.0), reward(2.0), None, None, reward_only).promoted
    fell = policy_gate(reward(0.0), reward(-1.0), None, None, reward_only)
    assert fell.verdict == REJECTED and fell.gate == "reward_only"
    # measured accuracy is tested whatever the gate: a reward-only config cannot promote a fall
    measured = policy_gate(reward(0.0), reward(0.1), Accuracy(90, 128), Accuracy(30, 128), reward_only)
    assert measured.verdict == REJECTED and measured.gate == "accuracy"


def test_a_policy_whose_plans_never_parse_measures_lowest():
    nothing = Reward.of([float("-inf")] * 4)
    assert nothing.mean == float("-inf")
    verdict = policy_gate(reward(0.0), nothing, Accuracy(60, 128), Accuracy(60, 128), RULE)
    assert verdict.verdict == REJECTED and "fell" in verdict.reason and not verdict.promoted


def test_reward_intervals_are_students_t():
    from scipy.stats import t

    values = [0.1, 0.4, 0.2, 0.9, 0.5]
    measured = Reward.of(values)
    import statistics

    half = t.ppf(0.975, 4) * statistics.stdev(values) / 5 ** 0.5
    assert measured.interval(0.95) == pytest.approx((statistics.mean(values) - half, statistics.mean(values) + half))
    assert Reward.of([0.3]).interval(0.95) == (0.3, 0.3)
