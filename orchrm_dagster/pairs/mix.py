"""Whether the pairs' source mix matches the configured ratio."""

from __future__ import annotations

from dataclasses import dataclass

from orchrm_dagster.pairs.rules import CORRECT_OVER_INCORRECT, SPECIALIZED_OVER_BASE


@dataclass(frozen=True)
class MixCheck:
    passed: bool
    share: float | None  # specialized-over-base share of all pairs
    wanted: float
    note: str


def mix_within_tolerance(counts: dict[str, int], mix_specialized: int, mix_correct: int, tolerance: float) -> MixCheck:
    """The mix is judged only when both sources produced pairs: when one source ran short, the rules keep all
    pairs of the scarce source and the ratio cannot hold (that is data, not a defect)."""
    specialized = counts.get(SPECIALIZED_OVER_BASE, 0)
    correct = counts.get(CORRECT_OVER_INCORRECT, 0)
    wanted = mix_specialized / (mix_specialized + mix_correct)
    total = specialized + correct
    if total == 0:
        return MixCheck(False, None, wanted, "no pairs")
    share = specialized / total
    if min(specialized, correct) == 0:
        return MixCheck(True, share, wanted, "only one source produced pairs: the ratio is not judged")
    passed = abs(share - wanted) <= tolerance
    return MixCheck(passed, round(share, 4), round(wanted, 4), "within tolerance" if passed else "outside tolerance")
