"""BM25 retrieval over a local corpus: the "web" of WebSearchAgent."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, runtime_checkable

import orjson
from rank_bm25 import BM25Okapi

_TOKEN = re.compile(r"[a-z0-9]+")

Hit = tuple[str, str, float]  # (document id, text, score)


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits."""
    return _TOKEN.findall(text.lower())


@runtime_checkable
class Retriever(Protocol):
    def search(self, query: str, k: int = 3) -> list[Hit]: ...


class BM25Retriever:
    """BM25Okapi over ``documents``; ids default to "0", "1", ... ."""

    def __init__(self, documents: list[str], ids: list[str] | None = None) -> None:
        if ids is not None and len(ids) != len(documents):
            raise ValueError(f"{len(ids)} ids for {len(documents)} documents")
        self.documents = list(documents)
        self.ids = list(ids) if ids is not None else [str(i) for i in range(len(documents))]
        tokenized = [tokenize(d) for d in self.documents]
        self._vocabularies = [frozenset(tokens) for tokens in tokenized]
        # BM25Okapi divides by the corpus size and the mean document length: both must be > 0
        self._bm25 = BM25Okapi(tokenized) if any(tokenized) else None

    def __len__(self) -> int:
        return len(self.documents)

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The ``k`` best-scoring documents that share a term with ``query``, best first (ties: corpus order)."""
        terms = tokenize(query)
        if self._bm25 is None or not terms or k <= 0:
            return []
        # filter on shared terms, not on score > 0: BM25Okapi's idf can be <= 0 in a very small corpus
        wanted = set(terms)
        matching = [i for i, vocabulary in enumerate(self._vocabularies) if not wanted.isdisjoint(vocabulary)]
        scores = self._bm25.get_scores(terms)
        ranked = sorted(matching, key=lambda i: (-scores[i], i))
        return [(self.ids[i], self.documents[i], float(scores[i])) for i in ranked[:k]]

    @classmethod
    def from_jsonl(cls, path: str | Path, text_field: str = "text", id_field: str = "id") -> BM25Retriever:
        """One document per JSON line; a line without ``id_field`` gets its line number as id."""
        documents: list[str] = []
        ids: list[str] = []
        with open(path, "rb") as lines:
            for number, line in enumerate(lines):
                if not line.strip():
                    continue
                row = orjson.loads(line)
                documents.append(str(row[text_field]))
                ids.append(str(row.get(id_field, number)))
        return cls(documents, ids)
