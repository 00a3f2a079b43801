"""What the steps of an ingest hand on: each worker's staged part (its Parquet files, for publishing), and the
report of the batch and of each of its files."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StagedPart:
    """What one worker staged: its lines read, its Parquet files of runs, calls and quarantine, and by file of
    the batch its lines and why it could not open one."""

    lines_read: int
    runs: str
    calls: str
    quarantine: str
    lines_by_source: dict[int, int] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)  # source index -> why it could not be opened


@dataclass
class FileReport:
    """One file of a batch: what its ingest read and kept, or why it could not read it at all."""

    name: str
    lines_read: int = 0
    runs: int = 0
    quarantined: int = 0
    failed: str | None = None


@dataclass
class IngestReport:
    batch_id: str
    source_file: str  # the batch's file, or "N files"
    lines_read: int = 0
    runs_written: int = 0
    subagent_calls_written: int = 0
    quarantined: int = 0
    workers: int = 1
    reasons: Counter = field(default_factory=Counter)  # "kind" or "kind: field" -> quarantined lines
    seconds: float = 0.0
    files: list[FileReport] = field(default_factory=list)

    @property
    def failed_files(self) -> dict[str, str]:
        return {f.name: f.failed for f in self.files if f.failed is not None}

    @property
    def quarantine_rate(self) -> float:
        return self.quarantined / self.lines_read if self.lines_read else 0.0

    @property
    def runs_per_second(self) -> float:
        return self.lines_read / self.seconds if self.seconds else 0.0
