"""The floor a reward model must clear before it may be a domain's champion (no torch)."""

from __future__ import annotations

from dataclasses import dataclass



@dataclass(frozen=True)
class Floor:
    """What a version must show on a domain's validation pairs before it may be that domain's champion: at least
    `min_pairs` pairs, and accuracy above chance (0.5) by a one-sided binomial test at `level`."""

    min_pairs: int
    level: float

    def p_value(self, right: int, pairs: int) -> float | None:
        """P(at least `right` of `pairs` ranked right | the model ranks at chance); None without pairs."""
        from scipy.stats import binomtest  # a second to import: not for commands that only read settings

        return float(binomtest(right, pairs, 0.5, alternative="greater").pvalue) if pairs else None

    def refusal(self, version: int, accuracy: float | None, pairs: int, p_value: float | None,
                own: bool = True) -> str | None:
        """Why `version` may not be champion on these pairs, and what would change that (None: it beats chance).
        `own`: the pairs are the domain's own; else the domain had none and was judged on the other domains'."""
        if not pairs:
            return f"v{version} had no validation pairs there: nothing shows it learned; land runs of its problems"
        judged = (f"{pairs} validation pairs there" if own else
                  f"no validation pairs of its own there, only {pairs} of other domains")
        if pairs < self.min_pairs:
            more = "land more runs" if own else "land runs of its problems"
            return (f"v{version} had {judged} (accuracy {accuracy:.3f}, p = {p_value:.2g} against chance), fewer "
                    f"than min_validation_pairs ({self.min_pairs}): {more} or lower min_validation_pairs")
        if p_value > self.level:
            where = f"on {pairs} pairs" if own else f"on {pairs} pairs of other domains (none of its own)"
            return (f"v{version}'s validation accuracy {accuracy:.3f} {where} does not beat chance (one-sided "
                    f"binomial test against 0.5: p = {p_value:.3g} > {self.level}): more runs (pairs to learn "
                    f"from and to judge on) or a stronger model would")
        return None
