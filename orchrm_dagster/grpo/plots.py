"""Reward, KL and held-out figures over policy rounds (each labelled with its training method), as one PNG."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from orchrm_dagster.reporting import figure_png  # noqa: E402


def rounds_png(rows: list[dict]) -> bytes:
    rows = sorted(rows, key=lambda r: r["round"])
    rounds = [r["round"] for r in rows]
    # 9 inches at figure_png's 110 dpi: 990 px, within the UI dialog that shows it (80% of the window)
    figure, (reward, kl, held_out) = plt.subplots(1, 3, figsize=(9, 3.4))
    reward.plot(rounds, [r["mean_reward"] for r in rows], marker="o")
    reward.set(title="mean training reward", xlabel="round")
    kl.plot(rounds, [r["kl"] for r in rows], marker="o", color="tab:red")
    kl.set(title="KL to the round's start", xlabel="round")
    held_out.plot(rounds, [r["heldout_reward_before"] for r in rows], marker="o", linestyle="--", label="before")
    held_out.plot(rounds, [r["heldout_reward_after"] for r in rows], marker="o", label="after")
    held_out.set(title="held-out reward\n(champion's mean score)", xlabel="round")
    held_out.legend(fontsize=8)
    labels = [f"{r['round']}\n{r.get('method') or 'grpo'}" for r in rows]  # rounds of different methods side by side
    for ax in (reward, kl, held_out):
        ax.set_xticks(rounds, labels=labels)
        ax.grid(alpha=0.3)
    return figure_png(figure)
