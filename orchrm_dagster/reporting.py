"""Small helpers that turn results into Markdown for Dagster metadata and the CLI, and the CLI's step progress."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence]) -> str:
    def cell(value) -> str:
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_image(png: bytes, alt: str) -> str:
    """A PNG inline in Markdown (a data URI), as Dagster's UI renders it in asset metadata."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode()})"


def figure_png(figure) -> bytes:
    """A matplotlib figure as PNG bytes (the figure is closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


class StepProgress:
    """What a command is doing, one step after another: `step` ends the step before and starts the next, `finish`
    ends the current one with what it produced, `note` says something between steps, `advance` counts one of
    `total` items done. For a log (standard output not a terminal) each event is one plain, timestamped line with the
    step's elapsed time; on a terminal, rich's live spinner or bar (see `step_progress`)."""

    def __init__(self, console, total: int | None = None):
        self.console, self.total = console, total
        self.began = time.monotonic()
        self.current: str | None = None
        self.step_began = self.began
        self.completed = 0

    def step(self, text: str) -> None:
        self.finish()
        self.current, self.step_began = text, time.monotonic()
        self._started(text)

    def finish(self, result: str = "") -> None:
        if self.current is not None:
            text, self.current = self.current, None
            self._finished(text, time.monotonic() - self.step_began, result)

    def fail(self, reason: str) -> None:
        text, self.current = self.current or "the command", None
        self._failed(text, time.monotonic() - self.step_began, reason)

    def note(self, text: str) -> None:
        raise NotImplementedError

    def update(self, text: str) -> None:
        """Where the current step is now (a long step's progress): the live line, or a plain line."""
        raise NotImplementedError

    def advance(self, steps: int = 1) -> None:
        self.completed += steps

    def _started(self, text: str) -> None:
        raise NotImplementedError

    def _finished(self, text: str, seconds: float, result: str) -> None:
        raise NotImplementedError

    def _failed(self, text: str, seconds: float, reason: str) -> None:
        raise NotImplementedError


class PlainProgress(StepProgress):
    """One line per event, `HH:MM:SS  started|finished|FAILED  what (elapsed): result`, for logs and pipes."""

    def _line(self, event: str, text: str) -> None:
        self.console.print(f"{time.strftime('%H:%M:%S')}  {event:<8}  {text}", markup=False, highlight=False,
                           soft_wrap=True)

    def note(self, text: str) -> None:
        self._line("", text)

    def update(self, text: str) -> None:
        self._line("", text)

    def _started(self, text: str) -> None:
        self._line("started", text)

    def _finished(self, text: str, seconds: float, result: str) -> None:
        self._line("finished", f"{text} ({duration(seconds)})" + (f": {result}" if result else ""))

    def _failed(self, text: str, seconds: float, reason: str) -> None:
        self._line("FAILED", f"{text} ({duration(seconds)}): {reason}")


class LiveProgress(StepProgress):
    """rich's live display on a terminal: a spinner (a bar when `total` is known) showing the current step; finished
    steps and notes stay above it."""

    def __init__(self, console, total: int | None = None):
        super().__init__(console, total)
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                                   TimeElapsedColumn)

        columns = [SpinnerColumn(), TextColumn("{task.description}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        self.live = Progress(*columns, TimeElapsedColumn(), console=console, transient=True)
        self.task = self.live.add_task("starting", total=total)

    def note(self, text: str) -> None:
        self.live.console.print(text, soft_wrap=True)

    def update(self, text: str) -> None:
        self.live.update(self.task, description=f"{self.current or ''}: {text}" if self.current else text)

    def advance(self, steps: int = 1) -> None:
        super().advance(steps)
        self.live.advance(self.task, steps)

    def _started(self, text: str) -> None:
        self.live.update(self.task, description=text)

    def _finished(self, text: str, seconds: float, result: str) -> None:
        self.live.console.print(f"[green]✓[/green] {text} [dim]({duration(seconds)})[/dim]"
                                + (f": {result}" if result else ""), soft_wrap=True)

    def _failed(self, text: str, seconds: float, reason: str) -> None:
        self.live.console.print(f"[red]✗ {text} ({duration(seconds)}): {reason}[/red]", soft_wrap=True)


@contextmanager
def step_progress(console, total: int | None = None) -> Iterator[StepProgress]:
    """The progress a command shows: `LiveProgress` on a terminal, `PlainProgress` lines otherwise. The step running
    when an exception leaves the block is reported failed with the exception's message; the last one finished."""
    progress = LiveProgress(console, total) if console.is_terminal else PlainProgress(console, total)
    live = getattr(progress, "live", None)
    with live if live is not None else nullcontext():
        try:
            yield progress
        except BaseException as err:
            import click  # here: the engine's plots import this module, and only the CLI raises click's errors

            clicks = isinstance(err, click.ClickException)
            message = err.format_message() if clicks else getattr(err, "message", None)
            reason = message or str(err) or type(err).__name__
            if not isinstance(err, SystemExit) or err.code:
                progress.fail(reason)
                err.reported = True  # the CLI does not print it again (orchrm_dagster.app.cli)
            if clicks and not isinstance(err, click.UsageError):  # reported above: click would print it again
                raise SystemExit(err.exit_code) from err
            raise  # a usage error keeps click's usage line
        progress.finish()


def duration(seconds: float) -> str:
    """`4.2 s`, `12 s`, `3 min 05 s`."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
