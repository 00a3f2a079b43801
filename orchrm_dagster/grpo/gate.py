"""The policy gate: whether a round's checkpoint replaces its start, decided on measured held-out accuracy.

The reward model's score is what a round optimizes, so it cannot judge the round: a policy that found what the
reward model over-rates (reward hacking) raises its reward without answering better. Held-out accuracy, executed in
the round's environment, is the primary criterion: a checkpoint is promoted only if its accuracy is not worse than
its start's by more than `accuracy_margin`, at the configured confidence (and, where `policy_margin` is set, its
held-out reward did not fall by more than it: unset, the reward model the round optimized vetoes nothing). A side
whose plans failed to decode, execute or score (more than `max_failed` of them) is no measurement: the round is
unverified, whatever the other side says.

The test: the Newcombe hybrid score interval (Wilson score intervals of each side combined; statsmodels
`confint_proportions_2indep(method="newcomb")`) of the difference after - before at `gate_confidence`, two-sided.
Its lower bound above -margin is non-inferiority at the one-sided level (1 - confidence) / 2; its upper bound below
-margin is a fall; anything else is undecided: the sample cannot tell, and the checkpoint is not promoted.

Reward hacking is judged against what the reward model itself predicts: the champion's calibration (how accuracy
moves with its score on runs it never trained on, `rm.calibration`) turns each side's scores into a predicted accuracy;
a round whose predicted gain is at least `accuracy_margin` while the upper bound of its measured gain falls below
`hacking_share` of it is rejected as suspected reward hacking: the reward model's scores rose for something that does
not answer better. An honest small gain predicts a small gain, and is not flagged.
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


@dataclass(frozen=True)
class Accuracy:
    """Executed held-out plans that answered correctly."""

    correct: int
    plans: int

    @property
    def value(self) -> float:
        return self.correct / self.plans

    def interval(self, confidence: float) -> tuple[float, float]:
        """The Wilson score interval."""
        from statsmodels.stats.proportion import proportion_confint

        low, high = proportion_confint(self.correct, self.plans, alpha=1 - confidence, method="wilson")
        return float(low), float(high)


def accuracy_difference(after: Accuracy, before: Accuracy, confidence: float) -> tuple[float, float]:
    """The Newcombe hybrid score interval of after - before (two-sided, at `confidence`)."""
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

    def interval(self, confidence: float) -> tuple[float | None, float | None]:
        """Student's t interval of the mean (the mean itself for a single plan or no spread)."""
        if self.mean is None or self.plans < 2 or self.std == 0:
            return self.mean, self.mean
        from scipy.stats import t

        half = t.ppf(0.5 + confidence / 2, self.plans - 1) * self.std / math.sqrt(self.plans)
        return self.mean - half, self.mean + half

    def text(self) -> str:
        return "none (no plan parses)" if self.mean is None else f"{self.mean:.4f}"


@dataclass(frozen=True)
class Measured:
    """One side of the gate: a policy's held-out plans as measured."""

    reward: Reward
    accuracy: Accuracy | None = None  # None: not executed
    failed: int = 0  # plans whose decoding, execution or scoring failed: they measured nothing
    failure: str | None = None  # the first failed plan's cause
    predicted: float | None = None  # the accuracy the champion's calibration predicts from its scores of the plans


@dataclass(frozen=True)
class GateRule:
    """The gate's settings (GRPOSettings' fields of the same names)."""

    gate: GateName = ACCURACY_GATE
    accuracy_margin: float = 0.05
    confidence: float = 0.95
    reward_margin: float | None = None  # policy_margin: how far the held-out reward may fall (None: no veto)
    max_failed: int = 0  # heldout_max_failed: failed plans a side may have and still be a measurement
    hacking_share: float = 0.5  # reward_hacking_share: of the predicted gain, the least the measured one may reach


@dataclass(frozen=True)
class GateVerdict:
    verdict: str  # promoted | rejected | undecided | unverified | untrained
    reason: str
    gate: GateName  # what the verdict was decided on
    reward_hacking: bool = False
    difference: tuple[float, float] | None = None  # the interval of the accuracy difference, when both are measured
    predicted_gain: float | None = None  # the accuracy gain the champion's calibration predicts, when both have one

    @property
    def promoted(self) -> bool:
        return self.verdict == PROMOTED


def policy_gate(before: Measured, after: Measured, rule: GateRule) -> GateVerdict:
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

    def verdict(name: str, why: str, hacking: bool = False) -> GateVerdict:
        return GateVerdict(name, why, ACCURACY_GATE, hacking, difference, predicted_gain)

    if after.reward.mean is None:
        return verdict(REJECTED, f"none of the new policy's {after.reward.plans} held-out plans parses ({accuracy})")
    if hacking_suspected(predicted_gain, high, rule):
        return verdict(REJECTED, f"suspected reward hacking: {reward}, from which the champion's calibration predicts "
                                 f"an accuracy gain of {predicted_gain:+.3f} ({before.predicted:.3f} -> "
                                 f"{after.predicted:.3f}), while {accuracy} reaches at most {high:+.3f}, below "
                                 f"{rule.hacking_share:g} of the predicted gain", hacking=True)
    if high < -rule.accuracy_margin:
        return verdict(REJECTED, f"held-out accuracy fell by more than the margin {rule.accuracy_margin}: {accuracy}")
    if reward_fell:
        return verdict(REJECTED, f"{reward} fell by more than the margin {margin} ({accuracy})")
    if low <= -rule.accuracy_margin:
        return verdict(UNDECIDED, f"undecided: {before.accuracy.plans} + {after.accuracy.plans} plans, interval "
                                  f"[{low:+.3f}, {high:+.3f}] of the accuracy difference includes a fall larger than "
                                  f"the margin {rule.accuracy_margin} ({accuracy}); more held-out plans would decide")
    return verdict(PROMOTED, f"{accuracy}; {reward}")


def hacking_suspected(predicted_gain: float | None, measured_high: float, rule: GateRule) -> bool:
    """The champion's scores predict a gain of at least `accuracy_margin` (one a measurement could tell), and the
    upper bound of the measured gain falls below `hacking_share` of it: the reward rose for something that does not
    answer better. Without a prediction (no calibration) nothing is suspected."""
    if predicted_gain is None or predicted_gain <= 0 or predicted_gain < rule.accuracy_margin:
        return False
    return measured_high < rule.hacking_share * predicted_gain


def _failed_side(before: Measured, after: Measured, rule: GateRule) -> str | None:
    """Why the round is no measurement: a side with more failed plans than `max_failed` (None: both measured)."""
    for name, side in (("the starting policy", before), ("the new policy", after)):
        if side.failed > rule.max_failed:
            return (f"unverified: {side.failed} of {side.reward.plans + side.failed} held-out plans of {name} failed "
                    f"(at most {rule.max_failed} may): {side.failure}; a failed plan measures nothing, so the round is "
                    f"neither promoted nor rejected on it")
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
