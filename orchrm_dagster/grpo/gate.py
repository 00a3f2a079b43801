"""The policy gate: whether a round's checkpoint replaces its start, decided on measured held-out accuracy.

The reward model's score is what a round optimizes, so it cannot judge the round: a policy that found what the
reward model over-rates (reward hacking) raises its reward without answering better. Held-out accuracy, executed in
the round's environment, is the primary criterion: a checkpoint is promoted only if its accuracy is not worse than
its start's by more than `accuracy_margin`, at the configured confidence, and its held-out reward did not fall.

The test: the Newcombe hybrid score interval (Wilson score intervals of each side combined; statsmodels
`confint_proportions_2indep(method="newcomb")`) of the difference after - before at `gate_confidence`, two-sided.
Its lower bound above -margin is non-inferiority at the one-sided level (1 - confidence) / 2; its upper bound below
-margin is a fall; anything else is undecided: the sample cannot tell, and the checkpoint is not promoted. A round
whose reward rose by more than `reward_hacking_rise` standard deviations of the start's held-out rewards while its
accuracy did not rise (the difference's interval reaches 0) is rejected as suspected reward hacking.
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

    mean: float
    std: float  # of the per-plan rewards (0 for one plan)
    plans: int

    @classmethod
    def of(cls, rewards: Sequence[float]) -> "Reward":
        n = len(rewards)
        mean = math.fsum(rewards) / n
        if not math.isfinite(mean):  # no plan parsed: -inf each, no spread to speak of
            return cls(mean, 0.0, n)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / (n - 1)) if n > 1 else 0.0
        return cls(mean, std, n)

    def interval(self, confidence: float) -> tuple[float, float]:
        """Student's t interval of the mean (the mean itself for a single plan or no spread)."""
        if self.plans < 2 or self.std == 0:
            return self.mean, self.mean
        from scipy.stats import t

        half = t.ppf(0.5 + confidence / 2, self.plans - 1) * self.std / math.sqrt(self.plans)
        return self.mean - half, self.mean + half


@dataclass(frozen=True)
class GateRule:
    """The gate's settings (GRPOSettings' fields of the same names)."""

    gate: GateName = ACCURACY_GATE
    accuracy_margin: float = 0.05
    confidence: float = 0.95
    reward_margin: float = 0.0  # policy_margin: how far the held-out reward may fall
    hacking_rise: float = 0.5  # reward rise, in standard deviations of the start's held-out rewards


@dataclass(frozen=True)
class GateVerdict:
    verdict: str  # promoted | rejected | undecided | unverified | untrained
    reason: str
    gate: GateName  # what the verdict was decided on
    reward_hacking: bool = False
    difference: tuple[float, float] | None = None  # the interval of the accuracy difference, when both are measured

    @property
    def promoted(self) -> bool:
        return self.verdict == PROMOTED


def policy_gate(before_reward: Reward, after_reward: Reward, before: Accuracy | None, after: Accuracy | None,
                rule: GateRule) -> GateVerdict:
    reward = f"held-out reward {before_reward.mean:.4f} -> {after_reward.mean:.4f}"
    reward_fell = after_reward.mean < before_reward.mean - rule.reward_margin
    if before is None or after is None:
        return _reward_only(reward, reward_fell, rule)
    difference = accuracy_difference(after, before, rule.confidence)
    low, high = difference
    accuracy = (f"held-out accuracy {before.value:.3f} ({before.correct}/{before.plans}) -> {after.value:.3f} "
                f"({after.correct}/{after.plans}), difference {after.value - before.value:+.3f}, "
                f"{rule.confidence:.0%} interval [{low:+.3f}, {high:+.3f}]")

    def verdict(name: str, why: str, hacking: bool = False) -> GateVerdict:
        return GateVerdict(name, why, ACCURACY_GATE, hacking, difference)

    if _hacking(before_reward, after_reward, low, rule):
        return verdict(REJECTED, f"suspected reward hacking: {reward} rose by more than {rule.hacking_rise} standard "
                                 f"deviations while {accuracy} did not rise (the interval reaches 0)", hacking=True)
    if high < -rule.accuracy_margin:
        return verdict(REJECTED, f"held-out accuracy fell by more than the margin {rule.accuracy_margin}: {accuracy}")
    if reward_fell:
        return verdict(REJECTED, f"{reward} fell by more than the margin {rule.reward_margin} ({accuracy})")
    if low <= -rule.accuracy_margin:
        return verdict(UNDECIDED, f"undecided: {before.plans} + {after.plans} plans, interval [{low:+.3f}, "
                                  f"{high:+.3f}] of the accuracy difference includes a fall larger than the margin "
                                  f"{rule.accuracy_margin} ({accuracy}); more held-out plans would decide")
    return verdict(PROMOTED, f"{accuracy}; {reward}")


def _hacking(before_reward: Reward, after_reward: Reward, accuracy_low: float, rule: GateRule) -> bool:
    """The reward rose by more than `hacking_rise` standard deviations (of the start's rewards; of one reward unit when
    they have none) while the accuracy did not rise: the interval of its difference reaches 0 (a rise the measured
    outcome does not confirm; a point estimate a little up by chance is no rise)."""
    unit = before_reward.std or 1.0
    return after_reward.mean - before_reward.mean > rule.hacking_rise * unit and accuracy_low <= 0


def _reward_only(reward: str, reward_fell: bool, rule: GateRule) -> GateVerdict:
    if rule.gate != REWARD_ONLY_GATE:
        return GateVerdict(UNVERIFIED, f"unverified: held-out accuracy was not measured (heldout_execute: false), and "
                                       f"the reward model the round optimized cannot judge it ({reward}); set "
                                       f"policy_gate: reward_only to promote on the reward alone", ACCURACY_GATE)
    if reward_fell:
        return GateVerdict(REJECTED, f"{reward} fell by more than the margin {rule.reward_margin} (reward-only gate)",
                           REWARD_ONLY_GATE)
    return GateVerdict(PROMOTED, f"{reward} (reward-only gate: accuracy not measured)", REWARD_ONLY_GATE)
