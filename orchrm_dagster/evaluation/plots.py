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


# Dagster's UI shows a Markdown image in a dialog at most 80% of the window wide (1280 px on a 1600 px screen):
# two 4.5-inch panels a row at figure_png's 110 dpi make 990 px, and more groups add rows, never columns.
COLUMNS, PANEL_INCHES, LEGEND_INCHES = 2, (4.5, 3.2), 1.2


def _grid(groups: list[tuple[str, str]]):
    """The figure, one panel per group (two a row), and a strip below them for the legend (ten methods crowd a
    panel)."""
    panels = max(len(groups), 1)
    columns = min(COLUMNS, panels)
    rows = math.ceil(panels / columns)
    figure = plt.figure(figsize=(PANEL_INCHES[0] * columns, PANEL_INCHES[1] * rows + LEGEND_INCHES))
    grid = figure.add_gridspec(rows + 1, columns, height_ratios=[PANEL_INCHES[1]] * rows + [LEGEND_INCHES])
    axes = [figure.add_subplot(grid[i // columns, i % columns]) for i in range(panels)]
    legend_strip = figure.add_subplot(grid[rows, :])
    legend_strip.set_axis_off()
    return figure, axes, legend_strip


def _legend(panels: list, legend_cell) -> None:
    handles = {}
    for ax in panels:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        legend_cell.legend(handles.values(), handles.keys(), loc="center", fontsize=8, frameon=False, ncol=3)


def accuracy_vs_n(rows: list[dict]) -> bytes:
    """One panel per (benchmark, policy): each method's accuracy at every N, with its 95% interval."""
    groups = sorted({(r["benchmark"], r["policy"]) for r in rows})
    figure, axes, legend_cell = _grid(groups)
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
    _legend(axes, legend_cell)
    return _png(figure)


def accuracy_vs_tokens(rows: list[dict]) -> bytes:
    """One panel per (benchmark, policy): accuracy against the honest total tokens per problem (verification, the
    generation of all N sampled plans, and execution)."""
    groups = sorted({(r["benchmark"], r["policy"]) for r in rows})
    figure, axes, legend_cell = _grid(groups)
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
    _legend(axes, legend_cell)
    return _png(figure)
