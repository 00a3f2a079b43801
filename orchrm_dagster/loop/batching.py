"""When the loop cuts landed files into run batches, and which go together: the rule the cost of a fleet's landing
pattern rests on. Each batch is one ingest run and one `run_batches` partition, so batches follow runs, not files.

- A file of `alone_bytes` or more goes alone, at once, in a batch named after it (its ingest reads it in parallel
  chunks).
- Smaller files are cut together, in landing order, up to `max_files` files or `max_bytes` bytes a batch. A full
  batch is cut at once.
- The batch that is not full (the last) is cut when the rate allows it and the drop it came with has settled: the
  rate is a token bucket (GCRA) of `burst` batches refilled one per `interval_s`, so after a quiet spell what lands
  goes at once, and a steady stream makes one batch per `interval_s`; settled means nothing of it landed in the
  last `settle_s` (a drop still being copied would be split), or its oldest file has waited `interval_s`. Only
  these batches count against the rate, so a file waits at most `interval_s` (and a tick) for its batch.

So batches a day are at most (files a day / max_files) + (bytes a day / max_bytes) + 86,400 / interval_s + burst,
plus one per large file: with the defaults, a fleet landing 10,000 small files a day steadily makes 48 a day.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from orchrm_dagster.engine_config import Field, engine_config
from orchrm_dagster.storage import LandedFile, NewBatch, batch_id_for


@engine_config
class BatchingSettings:
    max_files: int = Field(default=1000, description="A batch holds at most this many landed files")
    max_bytes: int = Field(default=256 << 20, description="A batch of small files holds at most this many bytes")
    alone_bytes: int = Field(default=64 << 20, description="A file this large goes alone, at once, in a batch named "
                                                          "after it (its ingest reads it in parallel chunks)")
    interval_s: float = Field(
        default=1800.0, description="Steady state: one batch of small files that is not full per interval (a full "
                                    "batch goes at once). It is the latency a stream of small files pays before its "
                                    "ingest starts, and the partitions it makes: at 1800 s about 50 batches a day and "
                                    "a wait landing -> cut of p50 10-15 min, p95 20-29 min; at 120 s, 72-720 batches a "
                                    "day (a file every 20 min to every 2 min; 576 for a file every 6 s) and a wait of "
                                    "p95 0.5-2.3 min (bench/batching_latency.py, the engine's rule over a simulated "
                                    "day); then ingest and the champion's scores (bench/soak.py). Lower it where runs "
                                    "should be scored within minutes")
    burst: int = Field(default=4, description="Batches that are not full cut back to back before interval_s "
                                              "applies: after a quiet spell, what lands goes at once")
    settle_s: float = Field(default=5.0, description="A batch that is not full waits until none of its files landed "
                                                     "in the last settle_s (a drop still being copied), or until "
                                                     "its oldest file waited interval_s")

    def __post_init__(self) -> None:
        if self.max_files < 1 or self.max_bytes < 1 or self.burst < 1 or self.interval_s < 0 or self.settle_s < 0:
            raise ValueError("max_files, max_bytes and burst must be >= 1, interval_s and settle_s >= 0")


@dataclass(frozen=True)
class Cut:
    batches: tuple[NewBatch, ...]
    waiting: int = 0  # pending files left for a later cut
    next_at: float | None = None  # when the files waiting are cut, unless more land first


def cut_batches(pending: Sequence[LandedFile], paced_cuts: Sequence[float], now: float,
                settings: BatchingSettings) -> Cut:
    """The batches to cut now from the landed files no batch holds (`pending`), given when the earlier batches cut
    by the rate were (`paced_cuts`, oldest first; full batches and large files do not count against the rate)."""
    large = [f for f in pending if f.size >= settings.alone_bytes]
    small = sorted((f for f in pending if f.size < settings.alone_bytes), key=lambda f: (f.landed_at, f.name))
    batches = [NewBatch(f.batch_id, (f.name,), False) for f in sorted(large, key=lambda f: f.name)]
    groups = _fill(small, settings)
    if not groups:
        return Cut(tuple(batches))
    last = groups[-1]
    full = len(last) >= settings.max_files or sum(f.size for f in last) >= settings.max_bytes
    batches += [_group(group, paced=False) for group in (groups if full else groups[:-1])]
    if full:
        return Cut(tuple(batches))
    settled_at = min(max(f.landed_at for f in last) + settings.settle_s,
                     min(f.landed_at for f in last) + settings.interval_s)
    next_at = max(settled_at, _allowed_from(_theoretical_arrival(paced_cuts, settings.interval_s), settings))
    if now < next_at:
        return Cut(tuple(batches), len(last), next_at)
    return Cut((*batches, _group(last, paced=True)))


def _fill(files: list[LandedFile], settings: BatchingSettings) -> list[list[LandedFile]]:
    groups: list[list[LandedFile]] = []
    size = 0
    for file in files:
        if not groups or len(groups[-1]) >= settings.max_files or size + file.size > settings.max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(file)
        size += file.size
    return groups


def _theoretical_arrival(cuts: Sequence[float], interval_s: float) -> float:
    """GCRA's theoretical arrival time after the cuts so far: each cut moves it to max(itself, the cut) + interval."""
    due = -math.inf
    for cut in cuts:
        due = max(due, cut) + interval_s
    return due


def _allowed_from(due: float, settings: BatchingSettings) -> float:
    """A cut conforms from `due` - (burst - 1) intervals on: `burst` cuts at once after a quiet spell, then one per
    interval."""
    return due - (settings.burst - 1) * settings.interval_s


def _group(files: list[LandedFile], paced: bool) -> NewBatch:
    """A batch of one small file is named after it; one of several after when its first file landed, how many
    files it holds and a hash of their names (no file's batch id looks like it: each holds .jsonl or .parquet)."""
    names = tuple(sorted(f.name for f in files))
    if len(names) == 1:
        return NewBatch(batch_id_for(names[0]), names, paced)
    first = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(min(f.landed_at for f in files)))
    digest = hashlib.blake2b("\n".join(names).encode(), digest_size=4).hexdigest()
    return NewBatch(f"landed-{first}-{len(names)}files-{digest}", names, paced)
