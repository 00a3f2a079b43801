"""`orchrm status` on roots in each state the loop knows, as a user reads it (and as `--format json` gives it to a
script): nothing landed; blocked without a champion; a step given up on after two failed runs; a round rejected as
reward hacking; the token budget spent; a batch that waited past the freshness window. The roots are written as
the readers read them (a reward model's manifest, the scores and rounds tables); nothing trains."""

import json
import time

import pytest
from click.testing import CliRunner

from orchrm_dagster.app.cli import main
from orchrm_dagster.loop import LoopSettings
from orchrm_dagster.storage import StorageRoot
from orchrm_dagster.synthetic import EXAMPLE_BATCH
from tests.loop_roots import round_row, write_reward_model, write_rounds, write_scores

RECIPE = LoopSettings().reward_model_config()  # the sources the loop's reward model trains on: no retrain due


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def status_json() -> dict:
    result = invoke("status", "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.fixture
def root(isolated_env) -> StorageRoot:
    return StorageRoot(str(isolated_env / "storage"))


@pytest.fixture
def with_pairs(root) -> StorageRoot:
    """The example batch ingested and its pairs built: the learning part is current but for the reward model."""
    assert invoke("ingest", str(EXAMPLE_BATCH)).exit_code == 0
    assert invoke("materialize", "pairs").exit_code == 0
    return root


def with_loop(monkeypatch, **settings) -> None:
    """The loop's settings as a team's settings file gives them (the daemon's loop resource reads the same file)."""
    import os
    from pathlib import Path

    import yaml

    path = Path(os.environ["ORCHRM_STORAGE"]).parent / "orchrm.yaml"
    path.write_text(yaml.safe_dump({"loop": settings}))
    monkeypatch.setenv("ORCHRM_CONFIG", str(path))


def test_nothing_landed_says_what_the_loop_waits_for(root):
    empty = invoke("status")
    assert empty.exit_code == 1
    assert f"nothing landed or ingested yet under {root.url}: the loop waits for files in its landing zone" in (
        empty.output)
    from orchrm_dagster.storage import Warehouse

    Warehouse(root).refresh_views()
    tables_only = invoke("status")
    assert tables_only.exit_code == 0
    assert "the loop: nothing landed yet, nothing to do: it waits for files in its landing zone" in tables_only.output
    assert status_json()["loop"] is None


def test_blocked_without_a_champion_says_why_and_what_would_change_that(with_pairs):
    write_reward_model(with_pairs, 1, right=18, validation_pairs={"math": 18}, config=RECIPE)
    result = invoke("status")
    assert result.exit_code == 0, result.output
    assert ("blocked: no champion reward model for the math domain: v1 had 18 validation pairs there (accuracy "
            "1.000, p = 3.8e-06 against chance), fewer than min_validation_pairs (20): land more runs or lower "
            "min_validation_pairs") in result.output
    assert "the loop now (as the daemon's sensors decide): blocked: no champion" in result.output
    loop = status_json()["loop"]
    assert loop["next"] == []
    by_domain = {c["domain"]: c for c in loop["champions"]}
    assert all(c["champion"] is None for c in by_domain.values())
    assert "only 18 of other domains" in by_domain["qa"]["problem"] and "18 validation pairs there" in (
        by_domain["math"]["problem"])
    assert loop["blocked"].startswith("no champion reward model for the math domain: v1 had 18 validation pairs")


def test_a_step_that_failed_twice_is_given_up_on_with_its_cause_and_attempts(root, monkeypatch):
    import assets.reward_model

    assert invoke("ingest", str(EXAMPLE_BATCH)).exit_code == 0

    def disk_full(*args, **kwargs):
        raise OSError("the disk is full")

    monkeypatch.setattr(assets.reward_model, "build_pairs_table", disk_full)
    stopped = invoke("loop", "--rounds", "1")
    assert stopped.exit_code == 1 and "the loop cannot go on" in stopped.output
    result = invoke("status")
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if "gave up on" in line]
    assert line.strip().startswith("gave up on pairs:") and "after 2 failed run(s): pairs: OSError: the disk is full" in line
    (failed,) = status_json()["loop"]["failed"]
    assert failed["step"].startswith("pairs:") and failed["attempts"] == 2 and "the disk is full" in failed["cause"]


def test_a_round_rejected_as_reward_hacking_is_flagged_with_its_figures(with_pairs):
    write_reward_model(with_pairs, 1, right=30, validation_pairs={"math": 30}, config=RECIPE)
    write_scores(with_pairs, 1)
    reason = "held-out reward rose 0.200 while accuracy did not: suspected reward hacking"
    write_rounds(with_pairs, [round_row(1, promoted=False, verdict="rejected", reward_hacking=True, reason=reason,
                                        environment="simulated", truth="plan_success_rate")])
    result = invoke("status")
    assert result.exit_code == 0, result.output
    assert f"round 1: suspected reward hacking, not promoted: {reason}" in result.output
    assert "next: round:2: round 2 of 2" in result.output
    row = [line for line in result.output.splitlines() if "│ 1 " in line and "rejected" in line]
    assert row and "│ yes " in row[0] and "│ simulated " in row[0] and "0.500 [0.300," in row[0]
    (last,) = status_json()["loop"]["rounds"]
    assert last["verdict"] == "rejected" and last["reward_hacking"] is True and last["environment"] == "simulated"
    assert last["heldout_accuracy_low_after"] == 0.3 and last["heldout_accuracy_high_after"] == 0.7
    champions = {c["domain"]: c for c in status_json()["loop"]["champions"]}
    assert champions["math"]["champion"] == 1 and champions["math"]["pairs"] == 30 and champions["math"]["own_pairs"]
    assert champions["math"]["p_value"] == pytest.approx(0.5 ** 30)
    assert champions["qa"]["champion"] == 1 and not champions["qa"]["own_pairs"]  # crowned on math's pairs: says so
    assert "30 (other domains')" in result.output


def test_a_spent_token_budget_stops_the_rounds_and_says_so(with_pairs, monkeypatch):
    write_reward_model(with_pairs, 1, right=30, validation_pairs={"math": 30}, config=RECIPE)
    write_scores(with_pairs, 1)
    write_rounds(with_pairs, [round_row(1, promoted=False)])  # 1,700 tokens
    with_loop(monkeypatch, token_budget=1500)
    result = invoke("status")
    assert result.exit_code == 0, result.output
    spent = "1,700 tokens (rounds 1,700, rollouts 0, reward-model retraining 0)"
    assert f"stopped: the loop has spent its token budget ({spent} of 1,500)" in result.output
    assert f"tokens: {spent} of the 1,500 token_budget (spent: no round starts)" in result.output
    loop = status_json()["loop"]
    assert loop["tokens"] == {"spent": 1700, "spent_rounds": 1700, "spent_rollouts": 0, "spent_retraining": 0,
                              "spent_unfinished": 0,
                              "budget": 1500} and loop["next"] == []


def test_a_batch_that_waited_past_the_window_for_the_champion_s_scores_is_named(with_pairs, monkeypatch):
    long_ago = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 3 * 86400))
    write_reward_model(with_pairs, 1, right=30, validation_pairs={"math": 30}, config=RECIPE, created_at=long_ago)
    with_loop(monkeypatch, scores_within_s=3600, champion_within_s=86400)
    fresh = invoke("status")
    assert "late: batch" not in fresh.output  # the batch was just ingested
    assert ("late: the latest reward model trained 3.0 days ago, longer than champion_within_s (24.0 h)"
            in fresh.output)
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 2 * 3600)  # two hours on, the batch still not scored
    later = invoke("status")
    (batch,) = with_pairs.batch_ids("runs")
    assert (f"late: batch {batch} has waited 2.0 h for the champion's scores, longer than scores_within_s (1.0 h): "
            f"the UI marks rm_scores failing its freshness policy") in later.output
