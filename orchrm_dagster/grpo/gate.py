"""The policy gate: whether a round's checkpoint replaces its start, decided on measured held-out accuracy.

The reward model's score is what a round optimizes, so it cannot judge the round: a policy that found what the
reward model over-rates (reward hacking) raises its reward without answering better. Held-out accuracy, executed in
the round's environment, is the primary criterion: a checkpoint is promoted only if its accuracy is not worse than
its start's by more than `accuracy_margin`, at the configured confidence, nor worse by more than it than the best
accuracy of any policy ever in use measured alike (`Reference`: rounds each within the margin of their start cannot
walk accuracy down); and, where `policy_margin` is set, its held-out reward did not fall by more than it (unset, the
reward model the round optimized vetoes nothing). A side whose plans failed to decode, execute or score (more than
`max_failed` of them, or all) is no measurement: the round is unverified, whatever the other side says.

The test: the interval of the difference after - before at `gate_confidence`, two-sided, paired by problem (both
sides are the same problems with the same seeds; `paired_difference`: Student's t over the per-problem differences,
the problem as the unit; bench/gate_interval.py measured its coverage by simulation). A side recorded without its
problems' counts falls back to the Newcombe interval of two independent proportions. Its lower bound above -margin
is non-inferiority at the one-sided level (1 - confidence) / 2; its upper bound below -margin is a fall; anything
else is undecided: the sample cannot tell, and the checkpoint is not promoted.

Reward hacking is judged against what the reward model itself predicts (`hacking_flag`): the champion's calibration
(how accuracy moves with its score on runs it never trained on, checked against a constant before it is used,
`rm.calibration`) turns each side's scores into a predicted accuracy. A round whose held-out reward rose (paired by
problem), whose accuracy did not measurably rise, and whose measured gain stays below `hacking_share` of the
predicted one is rejected as suspected reward hacking. The flag says when it is off and why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

PROMOTED, REJECTED, UNDECIDED, UNVERIFIED, UNTRAINED = "promoted", "rejected", "undecided", "unverified", "untrained"
GateName = Literal["accuracy", "reward_only"]  # what a checkpoint may be promoted on (grpo_rounds.gate)
ACCURACY_GATE: GateName = "accuracy"
REWARD_ONLY_GATE: GateName = "reward_only"


ProblemCounts = tuple[tuple[str, int, int], ...]  # (problem_id, correct, plans) of each held-out problem


@dataclass(frozen=True)
class Accuracy:
    """Executed held-out plans that answered correctly, in all and problem by problem."""

    correct: int
    plans: int
    by_problem: ProblemCounts = ()  # empty: not kept (a measure recorded before issue 55)

    @property
    def value(self) -> float:
        return self.correct / self.plans

    def interval(self, confidence: float) -> tuple[float, float]:
        """The Wilson score interval."""
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(self.correct, self.plans, alpha=1 - confidence, method="wilson")
        return float(low), float(high)

    @classmethod
    def of_problems(cls, counts: ProblemCounts) -> "Accuracy":
        counts = tuple(sorted((str(p), int(c), int(n)) for p, c, n in counts))
        return cls(sum(c for _, c, _ in counts), sum(n for _, _, n in counts), counts)


PAIRED, NEWCOMBE = "paired", "newcombe"  # how the difference's interval was computed (grpo_rounds.difference_method)


def accuracy_difference(after: Accuracy, before: Accuracy, confidence: float) -> tuple[float, float]:
    """The interval of after - before (two-sided, at `confidence`): paired by problem where both sides kept their
    problems' counts (`paired_difference`), else the Newcombe interval of two independent proportions."""
    if difference_method(after, before) == PAIRED:
        return paired_difference(after.by_problem, before.by_problem, confidence)
    return newcombe_difference(after, before, confidence)


def difference_method(after: Accuracy, before: Accuracy) -> str:
    common = {p for p, _, n in after.by_problem if n} & {p for p, _, n in before.by_problem if n}
    return PAIRED if len(common) >= MIN_PAIRED_PROBLEMS else NEWCOMBE


MIN_PAIRED_PROBLEMS = 2  # a paired interval needs a spread of per-problem differences


def paired_difference(after: ProblemCounts, before: ProblemCounts, confidence: float) -> tuple[float, float]:
    """The accuracy difference after - before with the problem as the unit: each problem measured on both sides
    gives one difference of its two accuracies (the same problem, seeds and samples on both sides), and Student's t
    interval of their mean (`paired_interval`). The sides' draws are not independent (shared problems, shared
    seeds), so two independent proportions' intervals are too wide under no change, and the problems are the sample
    whose spread the interval must carry (bench/gate_interval.py measured both). A problem measured on one side only
    (its plans failed on the other) is left out of both. Accuracies move in steps of one plan, so the interval is
    widened by half the mean difference's smallest step (a continuity correction: without it, a uniform change with
    shared seeds was covered 92.8% of the time at 32 x 3, with it 96.6%), and its spread is never taken below one plan's
    step (the spread had one problem moved by one plan): sides that agree on every problem of a small sample have not
    shown that they cannot differ."""
    plans = [n for _, _, n in (*after, *before) if n]
    step = 1 / max(plans) if plans else 0.0
    return paired_interval({p: c / n for p, c, n in after if n}, {p: c / n for p, c, n in before if n}, confidence,
                           step=step)


def paired_interval(after: dict[str, float], before: dict[str, float], confidence: float,
                    step: float = 0.0) -> tuple[float, float]:
    """Student's t interval (two-sided) of the mean per-problem difference after - before, over the problems both
    sides measured, widened by half the mean's smallest step (`step` / 2n) and its spread at least that of one
    difference of `step` among them (0: none; then sides that agree on every problem, or share only one, give a single
    value)."""
    import numpy as np
    from scipy.stats import t

    differences = np.array([value - before[p] for p, value in after.items() if p in before])
    if not len(differences):
        raise ValueError("no held-out problem was measured on both sides")
    mean, n = float(differences.mean()), len(differences)
    if n < MIN_PAIRED_PROBLEMS:
        return mean, mean
    spread = max(float(differences.std(ddof=1)), step / np.sqrt(n))
    if spread == 0:
        return mean, mean
    half = float(t.ppf(0.5 + confidence / 2, n - 1) * spread / np.sqrt(n)) + step / (2 * n)
    return mean - half, mean + half


def newcombe_difference(after: Accuracy, before: Accuracy, confidence: float) -> tuple[float, float]:
    """The Newcombe hybrid score interval of after - before, two independent proportions (two-sided)."""
    from statsmodels.stats.proportion import confint_proportions_2indep

    low, high = confint_proportions_2indep(after.correct, after.plans, before.correct, before.plans,
                                           method="newcomb", compare="diff", alpha=1 - confidence)
    return float(low), float(high)


@dataclass(frozen=True)
class Reward:
    """The champion's held-out rewards of a policy's plans (unparseable ones placed as the training rule does)."""

    mean: float | None  # None: no plan parsed, so there is nothing to place the plans against and no reward
    std: float  # of the per-plan rewards (0 for one plan)
    plans: int
    scored: bool = True  # False: no reward model scored the plans (an execution-only round)

    @classmethod
    def of(cls, rewards: Sequence[float]) -> "Reward":
        n = len(rewards)
        if not n or not all(math.isfinite(r) for r in rewards):
            raise ValueError("held-out rewards must be finite numbers: a plan that failed is counted as failed, "
                             "one that does not parse is placed by the rule")
        mean = math.fsum(rewards) / n
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
        return cls(mean, std, n)

    @classmethod
    def unparseable(cls, plans: int) -> "Reward":
        """No plan of the measure parses."""
        return cls(None, 0.0, plans)

    @classmethod
    def unscored(cls, plans: int) -> "Reward":
        """No reward model scores the plans (an execution-only round)."""
        return cls(None, 0.0, plans, scored=False)

    def interval(self, confidence: float) -> tuple[float | None, float | None]:
        """Student's t interval of the mean (the mean itself for a single plan or no spread)."""
        if self.mean is None or self.plans < 2 or self.std == 0:
            return self.mean, self.mean
        from scipy.stats import t

        half = t.ppf(0.5 + confidence / 2, self.plans - 1) * self.std / math.sqrt(self.plans)
        return self.mean - half, self.mean + half

    def text(self) -> str:
        if not self.scored:
            return "not scored (no reward model)"
        return "none (no plan parses)" if self.mean is None else f"{self.mean:.4f}"


@dataclass(frozen=True)
class Measured:
    """One side of the gate: a policy's held-out plans as measured."""

    reward: Reward
    accuracy: Accuracy | None = None  # None: not executed
    failed: int = 0  # plans whose decoding, execution or scoring failed: they measured nothing
    failure: str | None = None  # the first failed plan's cause
    predicted: float | None = None  # the accuracy the champion's calibration predicts from its scores of the plans
    reward_by_problem: tuple[tuple[str, float], ...] = ()  # each problem's mean held-out reward
    unpredicted: str | None = None  # why there is no prediction (predicted None): the flag says it is off for it


@dataclass(frozen=True)
class Reference:
    """The best accuracy of a policy ever in use, measured alike (the same accuracy key): a round is held against it
    as well as its start, so that rounds each within the margin of their start cannot walk accuracy down."""

    policy: str
    accuracy: Accuracy


@dataclass(frozen=True)
class GateRule:
    """The gate's settings (GRPOSettings' fields of the same names)."""

    gate: GateName = ACCURACY_GATE
    accuracy_margin: float = 0.05
    confidence: float = 0.95
    reward_margin: float | None = None  # policy_margin: how far the held-out reward may fall (None: no veto)
    max_failed: int = 0  # heldout_max_failed: failed plans a side may have and still be a measurement
    hacking_share: float = 1.5  # reward_hacking_share: of the predicted gain, the least the measured one may reach


@dataclass(frozen=True)
class GateVerdict:
    verdict: str  # promoted | rejected | undecided | unverified | untrained
    reason: str
    gate: GateName  # what the verdict was decided on
    reward_hacking: bool = False
    difference: tuple[float, float] | None = None  # the interval of the accuracy difference, when both are measured
    predicted_gain: float | None = None  # the accuracy gain the champion's calibration predicts, when both have one
    hacking_flag: str | None = None  # "on: ..." (what it checked) or "off: <why>"; None: accuracy not compared
    best: Reference | None = None  # the best accuracy ever in use, measured alike, when it is not the start's
    best_difference: tuple[float, float] | None = None  # the interval of after - best

    @property
    def promoted(self) -> bool:
        return self.verdict == PROMOTED


def policy_gate(before: Measured, after: Measured, rule: GateRule, best: Reference | None = None) -> GateVerdict:
    failed = _failed_side(before, after, rule)
    if failed is not None:
        return GateVerdict(UNVERIFIED, failed, rule.gate)
    reward = f"held-out reward {before.reward.text()} -> {after.reward.text()}"
    margin = rule.reward_margin if rule.reward_margin is not None or before.accuracy is not None else 0.0
    reward_fell = (margin is not None and before.reward.mean is not None and after.reward.mean is not None
                   and after.reward.mean < before.reward.mean - margin)
    predicted_gain = (after.predicted - before.predicted
                      if before.predicted is not None and after.predicted is not None else None)
    if before.accuracy is None or after.accuracy is None:
        return _reward_only(reward, reward_fell, margin, after, rule)
    difference = accuracy_difference(after.accuracy, before.accuracy, rule.confidence)
    low, high = difference
    accuracy = _accuracy_text(before.accuracy, after.accuracy, difference, rule.confidence)
    suspected, flag = hacking_flag(before, after, rule, difference)
    best_difference = (accuracy_difference(after.accuracy, best.accuracy, rule.confidence)
                       if best is not None else None)

    def verdict(name: str, why: str, hacking: bool = False) -> GateVerdict:
        return GateVerdict(name, why, ACCURACY_GATE, hacking, difference, predicted_gain, flag, best,
                           best_difference)

    if after.reward.mean is None and after.reward.scored:
        return verdict(REJECTED, f"none of the new policy's {after.reward.plans} held-out plans parses ({accuracy})")
    if suspected:
        return verdict(REJECTED, f"suspected reward hacking: {reward}; {flag}", hacking=True)
    if high < -rule.accuracy_margin:
        return verdict(REJECTED, f"held-out accuracy fell by more than the margin {rule.accuracy_margin}: {accuracy}")
    if reward_fell:
        return verdict(REJECTED, f"{reward} fell by more than the margin {margin} ({accuracy})")
    if low <= -rule.accuracy_margin:
        return verdict(UNDECIDED, f"undecided: {before.accuracy.plans} + {after.accuracy.plans} plans, interval "
                                  f"[{low:+.3f}, {high:+.3f}] of the accuracy difference includes a fall larger than "
                                  f"the margin {rule.accuracy_margin} ({accuracy}); more held-out plans would decide")
    if best is not None:
        best_low, best_high = best_difference
        against = (f"against the best accuracy in use so far, {best.policy}'s {best.accuracy.value:.3f} "
                   f"({best.accuracy.correct}/{best.accuracy.plans}), difference {best_low:+.3f} to {best_high:+.3f}")
        if best_high < -rule.accuracy_margin:
            return verdict(REJECTED, f"held-out accuracy fell by more than the margin {rule.accuracy_margin} {against} "
                                     f"({accuracy})")
        if best_low <= -rule.accuracy_margin:
            return verdict(UNDECIDED, f"undecided {against}: the interval includes a fall larger than the margin "
                                      f"{rule.accuracy_margin} ({accuracy})")
        accuracy += f"; {against}"
    return verdict(PROMOTED, f"{accuracy}; {reward}")


def hacking_flag(before: Measured, after: Measured, rule: GateRule,
                 measured: tuple[float, float]) -> tuple[bool, str]:
    """Whether reward hacking is suspected, and the flag's state in words: "off: <why>" where it cannot judge,
    "on: suspected ..." where it fires, "on: ..." with what it checked otherwise.

    It fires where the champion's held-out reward rose (the paired interval of the per-problem reward differences
    lies above 0: the champion prefers the new plans, as a round that optimized it would), the accuracy did not
    measurably rise (its interval reaches 0), and the upper bound of the measured accuracy gain falls below
    `hacking_share` of the gain the champion's calibration predicts from the same scores (`hacking_suspected`): the
    reward rose for something that does not answer better."""
    unpredicted = before.unpredicted or after.unpredicted
    if unpredicted is not None or before.predicted is None or after.predicted is None:
        return False, f"off: {unpredicted or 'no calibration predicted the accuracy of a side'}"
    rose = reward_rose(before, after, rule.confidence)
    if rose is None:
        return False, "off: no held-out reward to compare (no plan parses on a side)"
    gain = after.predicted - before.predicted
    low, high = rose
    checked = (f"reward difference [{low:+.4f}, {high:+.4f}], calibrated accuracy gain {gain:+.3f} "
               f"({before.predicted:.3f} -> {after.predicted:.3f}), measured [{measured[0]:+.3f}, "
               f"{measured[1]:+.3f}]")
    if hacking_suspected(gain, measured, rule, reward_rose=low > 0, resolution=1 / after.accuracy.plans):
        return True, (f"on: suspected: the champion's reward rose ({checked}), below {rule.hacking_share:g} of the "
                      f"predicted gain")
    return False, f"on: {checked}"


def hacking_suspected(predicted_gain: float | None, measured: tuple[float, float], rule: GateRule,
                      reward_rose: bool = True, resolution: float = 0.0) -> bool:
    """The reward rose, its calibration predicts an accuracy gain of at least `resolution` (one plan of a side: a
    smaller one no measurement could show), the measured gain's interval reaches 0 (no gain shown) and its upper
    bound is below `hacking_share` of the prediction. Without a prediction nothing is suspected; a gain the
    measurement shows is never a hack, whatever the calibration expected."""
    low, high = measured
    if predicted_gain is None or predicted_gain <= 0 or predicted_gain < resolution or not reward_rose or low > 0:
        return False
    return high < rule.hacking_share * predicted_gain


def reward_rose(before: Measured, after: Measured, confidence: float) -> tuple[float, float] | None:
    """The interval of the held-out reward's change, paired by problem (None: a side has no reward)."""
    if before.reward.mean is None or after.reward.mean is None:
        return None
    after_rewards, before_rewards = dict(after.reward_by_problem), dict(before.reward_by_problem)
    if len(after_rewards.keys() & before_rewards.keys()) >= MIN_PAIRED_PROBLEMS:
        return paired_interval(after_rewards, before_rewards, confidence)
    from scipy.stats import t

    spread = math.sqrt(before.reward.std ** 2 / before.reward.plans + after.reward.std ** 2 / after.reward.plans)
    half = t.ppf(0.5 + confidence / 2, max(1, min(before.reward.plans, after.reward.plans) - 1)) * spread
    change = after.reward.mean - before.reward.mean
    return change - half, change + half


def _failed_side(before: Measured, after: Measured, rule: GateRule) -> str | None:
    """Why the round is no measurement: a side with more failed plans than `max_failed`, or none measured (None:
    both measured)."""
    for name, side in (("the starting policy", before), ("the new policy", after)):
        if side.failed > rule.max_failed or not side.reward.plans:
            return (f"unverified: {side.failed} of {side.reward.plans + side.failed} held-out plans of {name} failed "
                    f"(at most {rule.max_failed} may, and one must not): {side.failure}; a failed plan measures "
                    f"nothing, so the round is neither promoted nor rejected on it")
    return None


def _accuracy_text(before: Accuracy, after: Accuracy, difference: tuple[float, float], confidence: float) -> str:
    low, high = difference
    return (f"held-out accuracy {before.value:.3f} ({before.correct}/{before.plans}) -> {after.value:.3f} "
            f"({after.correct}/{after.plans}), difference {after.value - before.value:+.3f}, {confidence:.0%} "
            f"interval [{low:+.3f}, {high:+.3f}]")


def _reward_only(reward: str, reward_fell: bool, margin: float, after: Measured, rule: GateRule) -> GateVerdict:
    if rule.gate != REWARD_ONLY_GATE:
        return GateVerdict(UNVERIFIED, f"unverified: held-out accuracy was not measured (heldout_execute: false), and "
                                       f"the reward model the round optimized cannot judge it ({reward}); set "
                                       f"policy_gate: reward_only to promote on the reward alone", ACCURACY_GATE)
    if after.reward.mean is None:
        return GateVerdict(REJECTED, f"none of the new policy's {after.reward.plans} held-out plans parses "
                                     f"(reward-only gate)", REWARD_ONLY_GATE)
    if reward_fell:
        return GateVerdict(REJECTED, f"{reward} fell by more than the margin {margin} (reward-only gate)",
                           REWARD_ONLY_GATE)
    return GateVerdict(PROMOTED, f"{reward} (reward-only gate: accuracy not measured)", REWARD_ONLY_GATE)
