"""The floor a reward model must clear before it may be a domain's champion (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

from scipy.stats import binomtest


@dataclass(frozen=True)
class Floor:
    """What a version must show on a domain's validation pairs before it may be that domain's champion: at least
    `min_pairs` pairs, and accuracy above chance (0.5) by a one-sided binomial test at `level`."""

    min_pairs: int
    level: float

    def p_value(self, right: int, pairs: int) -> float | None:
        """P(at least `right` of `pairs` ranked right | the model ranks at chance); None without pairs."""
        return float(binomtest(right, pairs, 0.5, alternative="greater").pvalue) if pairs else None

    def refusal(self, version: int, accuracy: float | None, pairs: int, p_value: float | None) -> str | None:
        """Why `version` may not be champion on these pairs (None: it beats chance)."""
        if not pairs:
            return f"v{version} had no validation pairs there: nothing shows it learned"
        if pairs < self.min_pairs:
            return (f"v{version} had {pairs} validation pairs there (accuracy {accuracy:.3f}), fewer than "
                    f"min_validation_pairs ({self.min_pairs})")
        if p_value > self.level:
            return (f"v{version}'s validation accuracy {accuracy:.3f} on {pairs} pairs does not beat chance "
                    f"(one-sided binomial test against 0.5: p = {p_value:.3g} > {self.level})")
        return None
