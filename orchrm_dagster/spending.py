"""Tokens counted where they are spent, attempt by attempt, so that a killed or failed attempt's tokens are counted too.

A step of the loop (a round) opens a journal for its attempt (`journal`); the code below it reports what it spends
(`spend(kind, tokens)`: held-out sampling, execution and scoring, the calibration, training's generation, rewards and
rollouts). The journal is written to the storage root as it grows (at most every `WRITE_EVERY_S` seconds, and when
the attempt ends, however it ends), so a kill loses at most the last few seconds of it. The loop's ledger reads every
journal: an attempt that committed its round is counted once, from its row; every other attempt (killed, failed,
given up) from its journal."""

from __future__ import annotations

import contextlib
import contextvars
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from orchrm_dagster.storage import StorageRoot

JOURNALS = "spending"  # folder of the storage root: spending/<step>/<attempt>.json
WRITE_EVERY_S = 10.0


@dataclass
class Journal:
    root: StorageRoot
    step: str  # what the attempt is of (r0001: a round)
    attempt: str  # one attempt's id (a Dagster run's, or a process's)
    tokens: dict[str, int] = field(default_factory=dict)
    written_at: float = 0.0
    finished: bool = False

    def add(self, kind: str, tokens: int) -> None:
        self.tokens[kind] = self.tokens.get(kind, 0) + int(tokens)
        if time.monotonic() - self.written_at >= WRITE_EVERY_S:
            self.write()

    def write(self) -> None:
        self.written_at = time.monotonic()
        body = {"step": self.step, "attempt": self.attempt, "tokens": self.tokens, "finished": self.finished,
                "updated_at": time.time()}
        self.root.fs.makedirs(self.root.path(JOURNALS, self.step), exist_ok=True)
        self.root.write_atomically(self.root.path(JOURNALS, self.step, f"{self.attempt}.json"),
                                   json.dumps(body).encode())

    @property
    def total(self) -> int:
        return sum(self.tokens.values())


_CURRENT: contextvars.ContextVar[Journal | None] = contextvars.ContextVar("orchrm_spending", default=None)


@contextlib.contextmanager
def journal(root: StorageRoot, step: str, attempt: str) -> Iterator[Journal]:
    """The attempt's journal: every `spend` inside it is counted in it, and it is written as it grows."""
    opened = Journal(root, step, attempt)
    token = _CURRENT.set(opened)
    try:
        yield opened
    finally:
        _CURRENT.reset(token)
        opened.finished = True
        try:
            opened.write()
        except OSError:  # a full disk or a lost store must not hide how the attempt itself ended
            pass


def spend(kind: str, tokens: int) -> None:
    """`tokens` of `kind` spent now, in the attempt's journal (nothing outside one)."""
    current = _CURRENT.get()
    if current is not None and tokens:
        current.add(kind, tokens)


_READ: dict[tuple, dict] = {}  # a journal as read, by its path and version: the loop lists them every tick


def journals(root: StorageRoot) -> list[dict]:
    """Every attempt's journal on the root (step, attempt, tokens by kind, finished); one listing, and a read only of
    the journals that changed since the last call."""
    folder = root.path(JOURNALS)
    if not root.fs.exists(folder):
        return []
    found = []
    for path, info in sorted(root.fs.find(folder, detail=True).items()):
        if not path.endswith(".json"):
            continue
        version = (root.url, path, info.get("size"), str(info.get("mtime") or info.get("LastModified")
                                                         or info.get("ETag")))
        if version not in _READ:
            try:
                _READ[version] = json.loads(root.fs.cat_file(path))
            except (OSError, ValueError):  # a journal being replaced: the next read has it
                continue
        found.append(_READ[version])
    if len(_READ) > 4 * len(found) + 64:  # versions no longer listed
        _READ.clear()
    return found


def uncommitted_tokens(root: StorageRoot, committed: dict[str, str]) -> int:
    """Tokens of every attempt whose step did not commit through it: `committed` maps a step to the attempt whose
    row counts its tokens already."""
    return sum(sum(j["tokens"].values()) for j in journals(root) if committed.get(j["step"]) != j["attempt"])


def top_up(kind: str, total: int) -> None:
    """The attempt's `kind` brought to `total` where what it was told as it went falls short (a part that reports
    only when it ends, or ran in other processes)."""
    current = _CURRENT.get()
    if current is not None:
        spend(kind, max(0, int(total or 0) - current.tokens.get(kind, 0)))
