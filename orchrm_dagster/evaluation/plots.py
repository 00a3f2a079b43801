"""The evaluation's figures as PNG bytes: accuracy vs N per method, and accuracy vs total tokens (log scale; every
sampled plan's generation counted, executed or not)."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # no display: render to memory
import matplotlib.pyplot as plt  # noqa: E402

from orchrm_dagster.evaluation.costs import total_tokens  # noqa: E402
from orchrm_dagster.reporting import figure_png as _png  # noqa: E402

_STYLE = {"oracle": {"linestyle": "--", "color": "0.5"}, "single": {"linestyle": ":", "color": "0.3"}}


def _label(method: str) -> str:
    return "oracle (upper bound)" if method == "oracle" else method


def _grid(groups: list[tuple[str, str]]):
    columns = min(3, len(groups))
    rows = math.ceil(len(groups) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    for extra in axes.flat[len(groups):]:
        extra.set_visible(False)
    return figure, list(axes.flat)


def accuracy_vs_n(rows: list[dict]) -> bytes:
    """One panel per (benchmark, policy): each method's accuracy at every N, with its 95% interval."""
    groups = sorted({(r["benchmark"], r["policy"]) for r in rows})
    figure, axes = _grid(groups or [("", "")])
    for ax, group in zip(axes, groups):
        for method in sorted({r["method"] for r in rows if (r["benchmark"], r["policy"]) == group}):
            points = sorted((r["n"], r["accuracy"], r["ci_low"], r["ci_high"]) for r in rows
                            if (r["benchmark"], r["policy"], r["method"]) == (*group, method))
            ns, accuracy, low, high = zip(*points)
            ax.plot(ns, accuracy, marker="o", label=_label(method), **_STYLE.get(method, {}))
            ax.fill_between(ns, low, high, alpha=0.12)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({r["n"] for r in rows}), labels=[str(n) for n in sorted({r["n"] for r in rows})])
        ax.set(title=f"{group[0]} / {group[1]}", xlabel="candidates N", ylabel="accuracy", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    return _png(figure)


def accuracy_vs_tokens(rows: list[dict]) -> bytes:
    """One panel per (benchmark, policy): accuracy against the honest total tokens per problem (verification, the
    generation of all N sampled plans, and execution)."""
    groups = sorted({(r["benchmark"], r["policy"]) for r in rows})
    figure, axes = _grid(groups or [("", "")])
    for ax, group in zip(axes, groups):
        for method in sorted({r["method"] for r in rows if (r["benchmark"], r["policy"]) == group}):
            points = sorted((total_tokens(r), r["accuracy"], r["n"]) for r in rows
                            if (r["benchmark"], r["policy"], r["method"]) == (*group, method))
            tokens, accuracy, ns = zip(*points)
            ax.plot([max(t, 1.0) for t in tokens], accuracy, marker="o", label=_label(method),
                    **_STYLE.get(method, {}))
        ax.set_xscale("log")
        ax.set(title=f"{group[0]} / {group[1]}", ylabel="accuracy", ylim=(0, 1.02),
               xlabel="tokens per problem (verification + generation + execution)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=7, loc="lower right")
    return _png(figure)
