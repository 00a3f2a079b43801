"""The named points where fault tests kill a process: armed, the first process to reach one waits there for its kill
and says its pid; unarmed, or without ORCHRM_FAULT_DIR, a point does nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchrm_dagster.faults import FAULT_DIR_ENV, POINTS, arm, fault_point, reached_by

PACKAGE = Path(__file__).resolve().parents[1] / "orchrm_dagster"


def test_an_unarmed_point_returns_at_once(tmp_path, monkeypatch):
    started = time.monotonic()
    fault_point("round.generating")  # no ORCHRM_FAULT_DIR
    monkeypatch.setenv(FAULT_DIR_ENV, str(tmp_path))
    fault_point("round.generating")  # not armed
    assert time.monotonic() - started < 1 and reached_by(tmp_path, "round.generating") is None


def test_the_first_process_at_an_armed_point_waits_for_its_kill_and_the_next_goes_by(tmp_path):
    arm(tmp_path, "round.promotion")
    code = "from orchrm_dagster.faults import fault_point; fault_point('round.promotion'); print('past', flush=True)"
    env = {**os.environ, FAULT_DIR_ENV: str(tmp_path)}
    first = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while reached_by(tmp_path, "round.promotion") is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert reached_by(tmp_path, "round.promotion") == first.pid and first.poll() is None  # waiting there
    second = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert second.stdout == "past\n"  # a point fires once
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL and first.stdout.read() == ""


def test_a_misspelt_point_cannot_be_armed(tmp_path):
    with pytest.raises(KeyError, match="round.generating"):
        arm(tmp_path, "round.generate")


@pytest.mark.parametrize("point", sorted(POINTS))
def test_every_point_is_placed_in_the_code(point):
    sources = "\n".join(path.read_text() for path in PACKAGE.rglob("*.py") if path.name != "faults.py")
    placed = f'"{point}"' in sources or (point.startswith("publish.") and 'f"publish.{self.kind}"' in sources)
    assert placed, f"{point} is listed in faults.POINTS but no code reaches it"


def test_a_steps_cause_names_its_error_class_once():
    from dagster._utils.error import SerializableErrorInfo

    from assets.runs import root_cause

    def info(message, cls_name):
        return SerializableErrorInfo(message, [], cls_name)

    assert root_cause(info("orchrm_dagster.storage.space.DiskFull: no space left\n", "DiskFull")) == \
        "DiskFull: no space left"
    assert root_cause(info("OSError: the disk is full", "OSError")) == "OSError: the disk is full"
    assert root_cause(info("the disk is full", "OSError")) == "OSError: the disk is full"
    assert root_cause(info("plain", None)) == "plain"
