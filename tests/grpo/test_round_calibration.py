"""A round's hacking flag reads one calibration for both sides: a retry takes its killed attempt's start measure with
that measure's calibration before it fits anything, and a start measure kept without a calibration turns the flag
off in words, never silently (issue 55). The killed attempt's tokens are counted from its journal."""

from __future__ import annotations

import dataclasses

import pytest

from orchrm_dagster.grpo import read_table, run_round
from orchrm_dagster.llm import TransformersSpec
from orchrm_dagster.rm.calibration import Calibration

from .test_round import registry, tiny_policy  # noqa: F401 (fixtures)
from .test_simulated_round import SIMULATED, champion_root  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.filterwarnings("ignore"), pytest.mark.slow]  # one and a half, and two, whole rounds

FITTED = Calibration(-1.0, 2.0, 300, 100, cv_log_loss=0.5, constant_log_loss=0.6)


def calibrations(monkeypatch, *answers):
    """`champion_calibration` answering `answers` in turn (an exception is raised)."""
    from orchrm_dagster.grpo import round as round_module

    left = list(answers)

    def fitted(*args, **kwargs):
        answer = left.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(round_module, "champion_calibration", fitted)


def test_a_retry_reads_its_kept_start_measure_and_its_calibration_before_fitting_anything(
        champion_root, tiny_policy, monkeypatch):  # noqa: F811
    from orchrm_dagster.grpo import round as round_module
    from orchrm_dagster.loop.read import round_attempts, rounds

    calibrations(monkeypatch, (FITTED, 123), AssertionError("the retry fitted a calibration again"))
    method_named = round_module.method_named

    class Killed:  # the round's own method, killed as it starts to train
        def __getattr__(self, name):
            return getattr(method_named("grpo"), name)

        def train(self, settings, context):
            raise RuntimeError("killed while training")

    monkeypatch.setattr(round_module, "method_named", lambda name: Killed())
    with pytest.raises(RuntimeError, match="killed while training"):
        run_round(champion_root, 1, SIMULATED, registry(tiny_policy), TransformersSpec())
    spent = round_attempts(champion_root, rounds(champion_root))["unfinished_round_tokens"]
    assert spent > 123  # the calibration's scoring and the start's held-out plans, though the attempt died
    monkeypatch.setattr(round_module, "method_named", method_named)
    row = run_round(champion_root, 1, SIMULATED, registry(tiny_policy), TransformersSpec()).row
    assert Calibration.from_json(row["calibration"]) == FITTED
    assert row["hacking_flag"].startswith("on: ")  # both sides predicted by the kept, checked calibration
    assert round_attempts(champion_root, rounds(champion_root))["unfinished_round_tokens"] == spent  # the committed
    # attempt counts once, from its row


def test_a_start_measure_kept_without_a_calibration_turns_the_flag_off_in_words(champion_root, tiny_policy,  # noqa: F811
                                                                                monkeypatch):
    calibrations(monkeypatch, (None, 0), (FITTED, 10))
    unpromoted = dataclasses.replace(SIMULATED, policy_margin=-1e9)  # each round starts from "tiny"
    first = run_round(champion_root, 1, unpromoted, registry(tiny_policy), TransformersSpec()).row
    assert first["hacking_flag"].startswith("off: the champion has no calibration")
    second = run_round(champion_root, 2, unpromoted, registry(tiny_policy), TransformersSpec()).row
    assert second["heldout_key_before"] == first["heldout_key_before"]  # reused: measured once
    assert second["hacking_flag"] == "off: the start's kept measure has no calibration to predict its accuracy"
    assert [r["round"] for r in read_table(champion_root, "grpo_rounds")] == [1, 2]
