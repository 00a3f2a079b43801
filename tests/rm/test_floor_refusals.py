"""While a domain has no champion (none trained, or none that beat chance on its validation pairs), what would use
one refuses and says why: scoring, Best-of-N and the GRPO round's champion lookup, the loop (blocked), the check."""

import dataclasses
import json
import re

import pytest

from orchrm_dagster.ingest import ingest_batch
from orchrm_dagster.labels import label_batch
from orchrm_dagster.loop import LoopSettings, decide, read_state
from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
from orchrm_dagster.rm import (NoChampion, RMTrainConfig, ScoringSettings, champion_scorer, champion_standings,
                               current_champions, score_runs, train_new_version)
from orchrm_dagster.rm.champions import write_champions
from orchrm_dagster.rm.checkpoints import checkpoints_dir
from orchrm_dagster.storage import land

from .toy import toy_pairs

UNCROWNED = "v1 had 6 validation pairs there (accuracy"


@pytest.fixture
def uncrowned(storage_root, tiny_backbone, good_records, tmp_path):
    """Runs of gsm8k and hotpotqa, and one trained version that no domain crowned: too few validation pairs."""
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in good_records) + "\n")
    landed = land(storage_root, path)
    ingest_batch(storage_root, landed.batch_id, landed.path)
    label_batch(storage_root, landed.batch_id, reference_answers(load_problems(problem_sources([])).table))
    config = RMTrainConfig(backbone=tiny_backbone, max_length=64, epochs=1, batch_size=4,
                           min_validation_pairs=50)
    outcome = train_new_version(storage_root, toy_pairs(8, 0), toy_pairs(6, 1), config, ["p"])
    assert outcome.champion_of == () and current_champions(storage_root) == {}
    return storage_root


def test_scoring_and_the_champion_lookup_refuse_with_the_reason(uncrowned):
    with pytest.raises(NoChampion, match=f"no champion reward model for any domain: choice: {re.escape(UNCROWNED)}"):
        score_runs(uncrowned, ScoringSettings(device="cpu"))
    # what a GRPO round (and Best-of-N) asks for its benchmark's domain
    with pytest.raises(NoChampion, match=f"no champion reward model for the math domain: {re.escape(UNCROWNED)}.*"
                                         f"fewer than min_validation_pairs \\(50\\)"):
        champion_scorer(uncrowned, ScoringSettings(device="cpu"), "math")


def test_the_loop_reports_itself_blocked_with_the_reason(uncrowned):
    read = read_state(uncrowned)
    # the learning part current (pairs built from these batches, none new since v1 trained): the rounds come next
    state = dataclasses.replace(read, batches=(), pairs_inputs=read.inputs, pairs=100, new_pairs=0)
    assert set(state.no_champion) == {"choice", "math", "qa"} and UNCROWNED in state.no_champion["math"]
    decision = decide(state, LoopSettings())  # the rounds train on gsm8k: math
    assert decision.steps == () and decision.blocked == state.no_champion["math"]


def test_a_domain_without_a_champion_is_left_unscored_and_the_report_says_why(uncrowned):
    write_champions(checkpoints_dir(uncrowned), {"math": 1})  # as a champion crowned before the floor would be
    report = score_runs(uncrowned, ScoringSettings(device="cpu"))
    assert report.runs_scored > 0 and report.runs_without_champion > 0
    assert set(report.refused) == {"qa"} and UNCROWNED in report.refused["qa"]
    standings = {s.domain: s for s in champion_standings(uncrowned)}
    # v1 holds math without having cleared the floor it trained with: the champion check fails on it
    assert standings["math"].champion == 1 and not standings["math"].beats_chance
    assert "fewer than min_validation_pairs (50)" in standings["math"].falls_short
    assert standings["qa"].champion is None and UNCROWNED in standings["qa"].no_champion
