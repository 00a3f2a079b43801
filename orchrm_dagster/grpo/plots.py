"""Reward, KL, held-out reward and held-out accuracy over policy rounds (each labelled with its training method and
verdict), as one PNG. Intervals are the rows' own (Student's t for rewards, Wilson for accuracy); a plot of rounds
whose held-out plans were executed in a simulated environment says so in its title."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from orchrm_dagster.contract import DEFAULT_ENVIRONMENT  # noqa: E402
from orchrm_dagster.environments import environment_label, is_simulated  # noqa: E402
from orchrm_dagster.grpo.checkpoints import TOKEN_COLUMNS, round_tokens  # noqa: E402
from orchrm_dagster.reporting import figure_png  # noqa: E402


def rounds_png(rows: list[dict]) -> bytes:
    rows = sorted(rows, key=lambda r: r["round"])
    rounds = [r["round"] for r in rows]
    # 9 inches at figure_png's 110 dpi: 990 px, within the UI dialog that shows it (80% of the window)
    figure, axes = plt.subplots(2, 2, figsize=(9, 6.4))
    reward, kl, held_out, accuracy = axes.flat
    reward.plot(rounds, [r["mean_reward"] for r in rows], marker="o")
    reward.set(title="mean training reward", xlabel="round")
    kl.plot(rounds, [r["kl"] for r in rows], marker="o", color="tab:red")
    kl.set(title="KL to the round's start", xlabel="round")
    if all(r["kl"] is None for r in rows):
        kl.text(0.5, 0.5, "not measured: KL off (kl_beta 0)", transform=kl.transAxes, ha="center", color="gray")
    _sides(held_out, rows, {side: (f"heldout_reward_{side}", f"heldout_reward_low_{side}",
                                   f"heldout_reward_high_{side}") for side in ("before", "after")})
    held_out.set(title="held-out reward (champion's mean score)", xlabel="round")
    _sides(accuracy, rows, {"before": ("heldout_accuracy_before", "heldout_accuracy_low_before",
                                       "heldout_accuracy_high_before"),
                            "after": ("heldout_accuracy", "heldout_accuracy_low_after", "heldout_accuracy_high_after")})
    accuracy.set(title="held-out accuracy (executed)", xlabel="round", ylim=(-0.02, 1.02))
    labels = [f"{r['round']}\n{r.get('method') or 'grpo'}\n{r.get('verdict') or ('promoted' if r.get('promoted') else '')}"
              + ("\nhacking?" if r.get("reward_hacking") else "") for r in rows]
    for ax in axes.flat:
        ax.set_xticks(rounds, labels=labels, fontsize=7)
        ax.set_xlim(rounds[0] - 0.5, rounds[-1] + 0.5)  # one round alone: not stretched to its sides' offsets
        ax.grid(alpha=0.3)
    environments = sorted({r.get("environment") or DEFAULT_ENVIRONMENT for r in rows})
    if any(is_simulated(name) for name in environments):
        figure.suptitle(f"SIMULATED: held-out plans executed in {', '.join(environments)} (correctness drawn from a "
                        f"truth function)", color="tab:red", fontsize=9)
    figure.tight_layout()
    return figure_png(figure)


def _sides(ax, rows: list[dict], columns: dict[str, tuple[str, str, str]]) -> None:
    """Before (dashed) and after, each with its interval where the row has one; columns: side -> (value, low, high)."""
    rounds = [r["round"] for r in rows]
    for (side, (value, low, high)), style, shift in zip(columns.items(), ("--", "-"), (-0.08, 0.08)):
        values = [r.get(value) if r.get(value) is not None and math.isfinite(r[value]) else None for r in rows]
        below = [v - r[low] if v is not None and r.get(low) is not None else 0 for v, r in zip(values, rows)]
        above = [r[high] - v if v is not None and r.get(high) is not None else 0 for v, r in zip(values, rows)]
        ax.errorbar([x + shift for x in rounds], [float("nan") if v is None else v for v in values],
                    yerr=[below, above], marker="o", linestyle=style, capsize=3, label=side)
    ax.legend(fontsize=8)


ROUNDS_HEADERS = ["round", "method", "rewards", "environment", "rm", "reward", "KL", "held-out reward before",
                  "held-out reward after", "accuracy before", "accuracy after", "difference", "predicted gain",
                  "failed plans", "verdict", "gate", "hacking?", "generation tokens", "reward tokens",
                  "rollout tokens", "training tokens", "held-out tokens", "total tokens"]


def rounds_table(rows: list[dict]) -> tuple[list[str], list[tuple]]:
    """The rounds as the asset's metadata and `orchrm loop` show them: each side's held-out reward and accuracy with
    its interval and plan count, the verdict and what it was decided on; a simulated environment named as such."""
    table = []
    for r in rows:
        tokens = [r.get(key) for key in TOKEN_COLUMNS]
        table.append((r["round"], r["method"], r["reward_mode"], environment_label(r.get("environment")), r["rm_version"],
                      _number(r["mean_reward"]), _number(r["kl"]),
                      _interval(r["heldout_reward_before"], r.get("heldout_reward_low_before"),
                                r.get("heldout_reward_high_before")),
                      _interval(r["heldout_reward_after"], r.get("heldout_reward_low_after"),
                                r.get("heldout_reward_high_after")),
                      accuracy_text(r, "before"), accuracy_text(r, "after"),
                      _interval(None, r.get("accuracy_difference_low"), r.get("accuracy_difference_high")),
                      predicted_gain_text(r), failed_text(r),
                      r.get("verdict") or ("promoted" if r["promoted"] else "rejected"), r.get("gate") or "",
                      "yes" if r.get("reward_hacking") else "", *tokens, round_tokens(r)))
    return ROUNDS_HEADERS, table


def _number(value) -> str:
    return "" if value is None else f"{value:.3f}" if math.isfinite(value) else str(value)


def _interval(value, low, high) -> str:
    """'v [low, high]' (or '[low, high]' alone)."""
    shown = _number(value) if value is not None else ""
    if low is None or high is None:
        return shown
    return f"{shown} [{low:+.3f}, {high:+.3f}]".strip() if value is None else f"{shown} [{low:.3f}, {high:.3f}]"


def accuracy_text(row: dict, side: str) -> str:
    """A grpo_rounds row's held-out accuracy on one side (before | after): value, interval and plan count."""
    column = "heldout_accuracy" if side == "after" else f"heldout_accuracy_{side}"
    if row.get(column) is None:
        return "not measured"
    plans = row.get(f"heldout_plans_{side}")
    correct = row.get(f"heldout_correct_{side}")
    count = f" ({correct}/{plans})" if plans is not None and correct is not None else ""
    return _interval(row[column], row.get(f"heldout_accuracy_low_{side}"), row.get(f"heldout_accuracy_high_{side}")) \
        + count


def predicted_gain_text(row: dict) -> str:
    """The accuracy gain the champion's calibration predicted from each side's scores (`grpo.gate`), with the two
    predictions; empty without a calibration."""
    before, after = row.get("heldout_predicted_accuracy_before"), row.get("heldout_predicted_accuracy_after")
    if before is None or after is None:
        return ""
    return f"{after - before:+.3f} ({before:.3f} -> {after:.3f})"


def failed_text(row: dict) -> str:
    """Held-out plans that failed (decoding, execution or scoring), before / after; empty when none did."""
    before, after = row.get("heldout_failed_before") or 0, row.get("heldout_failed_after") or 0
    return f"{before} / {after}" if before or after else ""
