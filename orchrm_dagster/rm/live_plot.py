"""The champions' live accuracy over time (rm.live's series), one panel a domain: each measure with its interval,
by source (the new pairs; a round's held-out plans), beside the champion's validation accuracy."""

from __future__ import annotations

import datetime

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import polars as pl  # noqa: E402

from orchrm_dagster.reporting import figure_png  # noqa: E402


def live_accuracy_png(series: pl.DataFrame) -> bytes:
    domains = sorted(series["domain"].unique().to_list())
    figure, axes = plt.subplots(len(domains), 1, figsize=(9, 2.8 * len(domains)), squeeze=False)
    for ax, domain in zip(axes[:, 0], domains):
        rows = series.filter(pl.col("domain") == domain).sort("measured_at")
        for held_out, (marker, colour) in ((False, ("o", "tab:blue")), (True, ("s", "tab:orange"))):
            part = rows.filter(pl.col("source").str.starts_with("held-out") == held_out)
            if not part.height:
                continue
            when = [datetime.datetime.fromtimestamp(t, datetime.timezone.utc) for t in part["measured_at"]]
            accuracy = part["accuracy"].to_list()
            ax.errorbar(when, accuracy, yerr=[[a - lo for a, lo in zip(accuracy, part["low"])],
                                               [hi - a for a, hi in zip(accuracy, part["high"])]],
                        marker=marker, color=colour, linestyle="none", capsize=3,
                        label="a round's held-out plans" if held_out else "new pairs")
        when = [datetime.datetime.fromtimestamp(t, datetime.timezone.utc) for t in rows["measured_at"]]
        ax.step(when, rows["validation_accuracy"].to_list(), where="post", color="gray", linestyle="--",
                label="champion's validation accuracy")
        versions = ", ".join(f"v{v}" for v in rows["rm_version"].unique().sort().to_list())
        ax.set(title=f"{domain}: champions' live accuracy ({versions})", ylim=(-0.02, 1.02), ylabel="ranked right")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    figure.autofmt_xdate()
    figure.tight_layout()
    return figure_png(figure)
