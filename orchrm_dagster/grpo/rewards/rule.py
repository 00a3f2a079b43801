"""The one rule every GRPO reward ends with: a plan that does not parse ranks below every plan of its group that
does, and each group is normalized as GRPO does, (r - mean) / std within the group.

Raw rewards have arbitrary offsets and scales (a Bradley-Terry score, a 0/1 correctness, a panel's fused score), so
no fixed value is safely below them all. The rule works on deviations from the group's mean instead: the offset never
matters, and neither does the scale. Because every reward places unparseable plans strictly below its parseable
ones, any positive weighted sum of rewards (TRL's `reward_weights`) does too.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence


def group_rewards(raw: Sequence[float | None], groups: Sequence[Hashable], margin: float) -> list[float]:
    """One GRPO reward per plan. `raw[i]` is None where plan i does not parse; `groups[i]` names its group (the plans
    of one prompt). Within a group, each unparseable plan is placed `margin` standard deviations of the parseable
    rewards below the lowest parseable one, and the group is then standardized. A group whose values are all equal
    (nothing parses, or every plan has the same reward) gets 0 everywhere: no advantage."""
    rewards = [0.0] * len(raw)
    for members in _members(groups):
        placed = _placed_deviations([raw[i] for i in members], margin)
        if placed is not None:
            for i, value in zip(members, _standardized(placed)):
                rewards[i] = value
    return rewards


def held_out_rewards(raw: Sequence[float | None], groups: Sequence[Hashable], margin: float) -> list[float | None]:
    """The same placement on the raw scale, without the standardization (which would give every policy a mean of
    0): what a held-out measurement averages to compare two policies. None for the plans of a group in which nothing
    parses."""
    rewards: list[float | None] = [None] * len(raw)
    for members in _members(groups):
        values = [raw[i] for i in members]
        placed = _placed_deviations(values, margin)
        if placed is not None:
            center = _mean([v for v in values if v is not None])
            for i, value in zip(members, placed):
                rewards[i] = center + value
    return rewards


def _members(groups: Sequence[Hashable]) -> list[list[int]]:
    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(group, []).append(i)
    return list(members.values())


def _placed_deviations(values: Sequence[float | None], margin: float) -> list[float] | None:
    """Deviations from the parseable plans' mean, unparseable plans at the floor (None: nothing parses). Deviations,
    not raw values: with a huge offset, `lowest - margin` could round back to `lowest`."""
    valid = [float(v) for v in values if v is not None]
    if not valid:
        return None
    if not all(math.isfinite(v) for v in valid):
        raise ValueError(f"a reward returned a non-finite value: {valid}")
    center = _mean(valid)
    deviations = [v - center for v in valid]
    # all equal: the unit does not change the standardized result, and rounding noise must not pass for a spread
    unit = _std(deviations) if max(valid) > min(valid) else 0.0
    floor = min(deviations) - margin * (unit or 1.0)
    return [floor if v is None else float(v) - center for v in values]


def _standardized(values: list[float]) -> list[float]:
    center = _mean(values)
    deviations = [v - center for v in values]
    spread = _std(deviations) if max(values) > min(values) else 0.0
    return [d / spread for d in deviations] if spread > 0 else [0.0] * len(values)


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values)


def _std(deviations: Sequence[float]) -> float:
    scale = max(abs(d) for d in deviations)  # squares of huge deviations would overflow
    if scale == 0:
        return 0.0
    return scale * math.sqrt(math.fsum((d / scale) ** 2 for d in deviations) / len(deviations))
