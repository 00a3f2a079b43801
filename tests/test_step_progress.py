"""The CLI's progress: plain timestamped lines for a log, rich's live display on a terminal, one abstraction."""

import io
import re
import sys

import pytest
from rich.console import Console
from rich.text import Text

from orchrm_dagster.reporting import LiveProgress, PlainProgress, duration, step_progress

LINE = re.compile(r"^\d\d:\d\d:\d\d  (started|finished|FAILED|        )  (.+)$")


def _console(terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=terminal, width=200), out


def test_a_log_gets_one_plain_timestamped_line_per_event_with_each_steps_elapsed_time():
    console, out = _console(terminal=False)
    with step_progress(console, total=2) as progress:
        assert isinstance(progress, PlainProgress)
        progress.step("ingesting a.jsonl")
        progress.finish("48 runs, 6 quarantined")
        progress.step("building pairs")
        progress.note("gsm8k x base: 8 runs executed")
        progress.step("training a reward model")
    lines = out.getvalue().splitlines()
    assert all(LINE.match(line) for line in lines), lines
    events = [LINE.match(line).groups() for line in lines]
    assert [e for e, _ in events] == ["started", "finished", "started", "        ", "finished", "started", "finished"]
    assert re.fullmatch(r"ingesting a\.jsonl \(\d\.\d s\): 48 runs, 6 quarantined", events[1][1])
    assert events[-1][1].startswith("training a reward model (")
    assert "\x1b" not in out.getvalue()  # no escape codes in a log


def test_the_step_running_when_the_command_fails_is_reported_with_the_reason():
    console, out = _console(terminal=False)
    with pytest.raises(ValueError), step_progress(console) as progress:
        progress.step("training a reward model")
        raise ValueError("no training pairs")
    last = out.getvalue().splitlines()[-1]
    assert re.search(r"FAILED    training a reward model \(\d\.\d s\): no training pairs$", last)


def test_a_terminal_gets_the_live_display():
    console, out = _console(terminal=True)
    with step_progress(console, total=1) as progress:
        assert isinstance(progress, LiveProgress)
        progress.step("ingesting a.jsonl")
        progress.finish("48 runs")
        progress.advance()
    shown = Text.from_ansi(out.getvalue()).plain
    assert "✓ ingesting a.jsonl" in shown and "48 runs" in shown
    assert progress.completed == 1


@pytest.mark.parametrize("seconds, text", [(4.24, "4.2 s"), (12.4, "12 s"), (185, "3 min 05 s")])
def test_durations_read_as_a_person_would_say_them(seconds, text):
    assert duration(seconds) == text


def test_a_click_error_is_reported_once_as_the_failed_step_and_exits_with_its_code():
    import click
    from click.testing import CliRunner

    @click.command()
    def failing():
        console = Console(file=sys.stdout, force_terminal=False, width=200)
        with step_progress(console) as progress:
            progress.step("materializing key:\"reward_model\"")
            raise click.ClickException("run 1234: no training pairs")

    result = CliRunner().invoke(failing)
    assert result.exit_code == 1
    assert result.output.count("no training pairs") == 1, result.output
    assert "FAILED    materializing" in result.output and "Error:" not in result.output
