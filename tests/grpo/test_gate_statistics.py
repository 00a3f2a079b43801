"""The gate's statistics (issue 55): the accuracy difference paired by problem, a round held against the best accuracy
ever in use as well as its start, a hacking flag that says when it is off and why, and measures keyed by what they
are. Each test here fails on c70acf3, where the interval was two independent proportions', a round was compared with
its start only, the flag was silently off, and a problem was keyed by its id."""

from __future__ import annotations

import dataclasses

import pytest

from orchrm_dagster.grpo import Accuracy, GateRule, GRPOSettings, Measured, Reference, Reward, policy_gate
from orchrm_dagster.grpo.gate import (PROMOTED, REJECTED, UNDECIDED, UNVERIFIED, newcombe_difference,
                                      paired_difference)
from orchrm_dagster.rm.calibration import Calibration

CONFIDENCE = 0.95


def counts(*per_problem: tuple[int, int]) -> tuple[tuple[str, int, int], ...]:
    return tuple((f"p{i:02d}", c, n) for i, (c, n) in enumerate(per_problem))


def measured(by_problem, predicted=None, rewards=None, unpredicted=None) -> Measured:
    accuracy = Accuracy.of_problems(by_problem)
    rewards = rewards or [0.0] * len(by_problem)
    return Measured(Reward(sum(rewards) / len(rewards), 0.1, accuracy.plans), accuracy, predicted=predicted,
                    reward_by_problem=tuple((p, r) for (p, _, _), r in zip(by_problem, rewards)),
                    unpredicted=unpredicted)


def test_the_difference_is_paired_by_problem_a_t_interval_over_per_problem_differences():
    import statistics

    from scipy.stats import t

    before = counts(*[(c, 4) for c in (0, 4, 1, 3, 4, 0, 2, 4, 0, 1, 4, 3)])
    after = counts(*[(c, 4) for c in (1, 4, 1, 4, 4, 0, 3, 4, 0, 2, 4, 3)])
    differences = [a[1] / 4 - b[1] / 4 for a, b in zip(after, before)]
    n = len(differences)
    # Student's t, widened by half the mean difference's smallest step (one plan of one problem: 1 / (4 n))
    half = t.ppf(0.975, n - 1) * statistics.stdev(differences) / n ** 0.5 + 1 / (2 * 4 * n)
    mean = statistics.mean(differences)
    assert paired_difference(after, before, CONFIDENCE) == pytest.approx((mean - half, mean + half))
    # the same counts as two independent proportions: far wider, as the problems' difficulty is counted as noise
    low, high = newcombe_difference(Accuracy.of_problems(after), Accuracy.of_problems(before), CONFIDENCE)
    assert high - low > 2 * (2 * half)
    # the gate uses the paired interval whenever both sides kept their problems' counts
    verdict = policy_gate(measured(before), measured(after), GateRule())
    assert verdict.difference == pytest.approx((mean - half, mean + half)) and verdict.verdict == PROMOTED


def test_a_problem_measured_on_one_side_only_is_left_out_of_both():
    before = counts((2, 4), (4, 4), (0, 4))
    after = counts((3, 4), (4, 4))  # the third problem's plans all failed on the new side
    assert paired_difference(after, before, CONFIDENCE) == paired_difference(after, before[:2], CONFIDENCE)


def test_a_round_within_the_margin_of_its_start_but_below_the_best_in_use_is_not_promoted():
    best = counts(*[(4, 4)] * 48)
    start = counts(*([(4, 4)] * 45 + [(3, 4)] * 3))  # promoted once, a little below the best
    walked = counts(*([(4, 4)] * 42 + [(3, 4)] * 6))  # a little below the start: within the margin of it
    rule = GateRule()
    alone = policy_gate(measured(start), measured(walked), rule)
    assert alone.verdict == PROMOTED  # what the gate did before: each step within the margin of the last
    held = policy_gate(measured(start), measured(walked), rule, Reference("grpo-r0001", Accuracy.of_problems(best)))
    assert held.verdict in (REJECTED, UNDECIDED) and not held.promoted
    assert "grpo-r0001" in held.reason and held.best_difference[0] <= -rule.accuracy_margin


def test_the_flag_says_when_it_is_off_and_why_never_silently():
    rising = [0.0] * 8, [0.5] * 8
    flat = counts(*[(2, 4)] * 8)
    no_calibration = policy_gate(measured(flat, rewards=rising[0], unpredicted="the champion has no calibration"),
                                 measured(flat, rewards=rising[1]), GateRule())
    assert no_calibration.hacking_flag == "off: the champion has no calibration"
    untrusted = Calibration(0.0, 0.01, 200, 60, cv_log_loss=0.62, constant_log_loss=0.61)
    assert not untrusted.trusted and "no better than a constant" in untrusted.untrusted_reason()
    unchecked = Calibration(0.0, 1.0, 200, 60)  # a fit recorded before the check: never trusted blindly
    assert not unchecked.trusted and "before calibrations were checked" in unchecked.untrusted_reason()


def test_a_hack_is_flagged_when_the_reward_rose_and_the_accuracy_stayed_flat():
    flat = counts(*[(2, 4)] * 16)
    rule = GateRule()
    hack = policy_gate(measured(flat, predicted=0.30, rewards=[0.0 + i / 100 for i in range(16)]),
                       measured(flat, predicted=0.55, rewards=[0.5 + i / 100 for i in range(16)]), rule)
    assert hack.reward_hacking and hack.verdict == REJECTED and hack.hacking_flag.startswith("on: suspected")
    # the same accuracy with a reward that did not rise: nothing is suspected, at any margin (it fired on noise at 0)
    quiet = policy_gate(measured(flat, predicted=0.30, rewards=[0.1 * (i % 2) for i in range(16)]),
                        measured(flat, predicted=0.301, rewards=[0.1 * ((i + 1) % 2) for i in range(16)]),
                        dataclasses.replace(rule, accuracy_margin=0.0))
    assert not quiet.reward_hacking and quiet.hacking_flag.startswith("on: ")
    # a gain the measurement shows is never a hack, whatever the calibration expected
    gained = counts(*[(4, 4)] * 16)
    honest = policy_gate(measured(flat, predicted=0.2, rewards=[0.0] * 16),
                         measured(gained, predicted=0.99, rewards=[1.0 + i / 100 for i in range(16)]), rule)
    assert not honest.reward_hacking and honest.promoted


def test_a_side_with_no_plan_measured_is_unverified_whatever_max_failed_allows():
    nothing = Measured(Reward.unparseable(0), None, 96, "execution failed (agent_failed): down")
    good = measured(counts(*[(2, 3)] * 32))
    verdict = policy_gate(good, nothing, GateRule(max_failed=10_000))
    assert verdict.verdict == UNVERIFIED and "reward_only" not in verdict.reason


def test_heldout_max_failed_must_be_below_a_sides_plans():
    with pytest.raises(ValueError, match="heldout_max_failed 96 must be below a side's 32 x 3 = 96"):
        GRPOSettings(heldout_max_failed=96)
    assert GRPOSettings(heldout_max_failed=95).heldout_max_failed == 95
