"""Win-lose pairs as plain text lists."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields

PAIR_COLUMNS = ("pair_id", "source", "question", "chosen_plan", "rejected_plan")


@dataclass(frozen=True)
class PairTexts:
    """Equal-length lists: row i is one pair (question[i], chosen_plan[i] beats rejected_plan[i])."""

    pair_id: list[str]
    question: list[str]
    chosen_plan: list[str]
    rejected_plan: list[str]
    source: list[str]

    def __post_init__(self):
        lengths = {f.name: len(getattr(self, f.name)) for f in fields(self)}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"PairTexts columns differ in length: {lengths}")

    def __len__(self) -> int:
        return len(self.pair_id)

    @classmethod
    def empty(cls) -> PairTexts:
        return cls([], [], [], [], [])

    @classmethod
    def from_arrow(cls, table, split: str | None = None) -> PairTexts:
        """Read the pair columns of a pyarrow table; with `split`, only the rows whose `split` column equals it."""
        if split is not None:
            import pyarrow.compute as pc

            table = table.filter(pc.equal(table["split"], split))
        return cls(**{name: [str(v) for v in table[name].to_pylist()] for name in PAIR_COLUMNS})

    def select(self, indices) -> PairTexts:
        return PairTexts(**{f.name: [getattr(self, f.name)[i] for i in indices] for f in fields(self)})

    def fingerprint(self) -> str:
        """sha256 over every pair's id and texts, in order."""
        digest = hashlib.sha256()
        for row in zip(*(getattr(self, f.name) for f in fields(self))):
            for value in row:
                digest.update(value.encode())
                digest.update(b"\x00")
        return digest.hexdigest()
