"""The plots fit the dialog Dagster's UI shows them in (at most 80% of the window: 1280 px on a 1600 px screen):
more groups add rows, never width."""

import io

import pytest
from PIL import Image

from orchrm_dagster.evaluation.plots import accuracy_vs_n, accuracy_vs_tokens
from orchrm_dagster.grpo import rounds_png

MAX_WIDTH_PX = 1100
METHODS = ("single", "orchrm_bon", "offshelf_rm", "majority_vote", "trajectory_judge", "trajectory_judge_truncated",
           "plan_judge", "logprob", "verifier_panel", "oracle")


def evaluation_rows(benchmarks: int, policies: int) -> list[dict]:
    return [{"benchmark": f"benchmark{b}", "policy": f"policy{p}", "method": method, "n": n, "accuracy": 0.5,
             "ci_low": 0.4, "ci_high": 0.6, "verification_tokens": 100.0 * n, "generation_tokens": 800.0 * n,
             "execution_tokens": 3000.0 * n}
            for b in range(benchmarks) for p in range(policies) for method in METHODS for n in (1, 2, 4, 8)]


def size(png: bytes) -> tuple[int, int]:
    return Image.open(io.BytesIO(png)).size


@pytest.mark.parametrize("plot", [accuracy_vs_n, accuracy_vs_tokens])
def test_evaluation_plots_fit_the_dialog_and_grow_in_rows(plot):
    one, main_job, many = (size(plot(evaluation_rows(b, p))) for b, p in ((1, 1), (3, 2), (6, 3)))

    assert max(one[0], main_job[0], many[0]) <= MAX_WIDTH_PX
    assert main_job[0] == many[0] and many[1] > main_job[1] > one[1]


def test_an_empty_evaluation_still_draws():
    assert size(accuracy_vs_n([]))[0] <= MAX_WIDTH_PX


def test_the_rounds_plot_fits_the_dialog():
    rows = [{"round": r, "mean_reward": 0.1 * r, "kl": 0.01, "heldout_reward_before": 0.2,
             "heldout_reward_after": 0.3, "method": "grpo"} for r in range(1, 9)]

    assert size(rounds_png(rows))[0] <= MAX_WIDTH_PX
