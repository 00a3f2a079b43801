"""BM25 retrieval over a local corpus: the "web" of WebSearchAgent.

A corpus is a JSONL file, one document a line: ``{"id": ..., "text": ..., "title": ...}`` (``title`` optional; it
opens the indexed text). Shipped corpora are named in :data:`SHIPPED_CORPORA`:

- ``hotpotqa``: the Wikipedia paragraphs of HotpotQA's *distractor setting* for the shipped dev questions
  (data/benchmarks/hotpotqa_dev_paragraphs.jsonl, provenance in SOURCES.md), one document per titled paragraph,
  deduplicated. It LEAKS answers by design: each question's paragraphs include its two gold supporting paragraphs
  (plus eight distractors), which is what the benchmark's distractor setting defines. Scores on it are distractor-
  setting scores, not open-domain ones. Only the first 53 dev questions have their paragraphs shipped (the only
  public official-format copy found is truncated there); for the others the corpus holds no gold paragraph.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Protocol, runtime_checkable

import orjson
from rank_bm25 import BM25Okapi

log = logging.getLogger(__name__)

SHIPPED_CORPORA: dict[str, str] = {"hotpotqa": "hotpotqa_dev_paragraphs.jsonl"}

_TOKEN = re.compile(r"[a-z0-9]+")

Hit = tuple[str, str, float]  # (document id, text, score)


def tokenize(text: str) -> list[str]:
    """Lower-cased runs of letters and digits."""
    return _TOKEN.findall(text.lower())


@runtime_checkable
class Retriever(Protocol):
    def search(self, query: str, k: int = 3) -> list[Hit]: ...


class BM25Retriever:
    """BM25Okapi over ``documents``; ids default to "0", "1", ... . ``source`` and ``rejected``: the corpus file
    it was read from and the lines of it that were skipped."""

    def __init__(self, documents: list[str], ids: list[str] | None = None, *, source: str | None = None,
                 rejected: tuple[str, ...] = ()) -> None:
        if ids is not None and len(ids) != len(documents):
            raise ValueError(f"{len(ids)} ids for {len(documents)} documents")
        self.source = source
        self.rejected = tuple(rejected)
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
        """One document per valid JSON line of :func:`read_corpus` (bad lines are skipped and logged)."""
        corpus = read_corpus(path, text_field, id_field)
        for problem in corpus.rejected:
            log.warning("corpus line skipped: %s", problem)
        return cls(corpus.documents, corpus.ids, source=str(path), rejected=tuple(corpus.rejected))


@dataclass(frozen=True)
class Corpus:
    ids: list[str]
    documents: list[str]
    rejected: list[str]  # "file:line: field: reason" for every line that was skipped


def read_corpus(path: str | Path, text_field: str = "text", id_field: str = "id") -> Corpus:
    """The documents of a JSONL corpus file. A line without ``id_field`` gets its line number as id; a line that is
    not a JSON object, has no non-empty string ``text_field``, or repeats an id is skipped and reported in
    ``rejected``; FileNotFoundError naming the file when it does not exist."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"corpus file {path} not found")
    ids: list[str] = []
    documents: list[str] = []
    rejected: list[str] = []
    first_line_of: dict[str, int] = {}
    with open(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            document = _document(line, number, text_field, id_field)
            if isinstance(document, str):
                rejected.append(f"{path}:{number}: {document}")
            elif document[0] in first_line_of:
                rejected.append(f"{path}:{number}: {id_field}: {document[0]!r} repeats line {first_line_of[document[0]]}")
            else:
                first_line_of[document[0]] = number
                ids.append(document[0])
                documents.append(document[1])
    return Corpus(ids, documents, rejected)


def _document(line: bytes, number: int, text_field: str, id_field: str) -> tuple[str, str] | str:
    """(id, text) of one corpus line, or "field: reason" when the line is unusable."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return f"(line): not valid JSON ({exc})"
    if not isinstance(row, dict):
        return "(line): not a JSON object"
    text = row.get(text_field)
    if text is None:
        return f"{text_field}: missing"
    if not isinstance(text, str) or not text.strip():
        return f"{text_field}: must be a non-empty string"
    doc_id = row.get(id_field, number)
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or not str(doc_id).strip():
        return f"{id_field}: must be a non-empty string or an integer"
    title = row.get("title")
    if isinstance(title, str) and title.strip():
        text = f"{title.strip()}\n{text}"
    return str(doc_id), text


def corpus_path(corpus: str) -> Path:
    """The file of a shipped corpus name, or ``corpus`` itself as a path."""
    if corpus in SHIPPED_CORPORA:
        return Path(str(files("orchrm_dagster") / "data" / "benchmarks" / SHIPPED_CORPORA[corpus]))
    return Path(corpus).expanduser()


def load_retriever(corpus: str) -> BM25Retriever:
    """The BM25 retriever over a shipped corpus name or a corpus file, built once per process and file version (the
    cache key is the resolved path, its modification time and size). FileNotFoundError when the file is missing
    (naming the shipped corpora), ValueError when no line of it is a valid document."""
    path = corpus_path(corpus)
    if not path.is_file():
        raise FileNotFoundError(f"corpus {corpus!r}: no file {path} (shipped corpora: {', '.join(SHIPPED_CORPORA)}; "
                                f"or give a JSONL file with id/text fields)")
    stat = path.stat()
    return _retriever_of_file(str(path.resolve()), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _retriever_of_file(path: str, mtime_ns: int, size: int) -> BM25Retriever:
    retriever = BM25Retriever.from_jsonl(path)
    if not retriever.documents:
        raise ValueError(f"corpus file {path} has no valid document: "
                         f"{'; '.join(retriever.rejected[:3]) or 'it is empty'}")
    return retriever
