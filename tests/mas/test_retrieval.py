from __future__ import annotations

import orjson
import pytest

from orchrm_dagster.mas.retrieval import BM25Retriever, Retriever, tokenize

DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "Berlin is the capital of Germany; its largest city too.",
    "The Seine river flows through Paris.",
    "Mount Fuji is the highest mountain in Japan.",
    "Bananas are rich in potassium.",
]


def test_tokenize_lowercases_and_splits_on_non_alphanumerics():
    assert tokenize("Paris's Eiffel-Tower, 1889!") == ["paris", "s", "eiffel", "tower", "1889"]


def test_ranks_by_bm25_best_first():
    retriever = BM25Retriever(DOCUMENTS, ["paris", "berlin", "seine", "fuji", "banana"])
    hits = retriever.search("capital of France", k=3)
    assert [doc_id for doc_id, _, _ in hits] == ["paris", "berlin"]  # only these share a term
    assert hits[0][1] == DOCUMENTS[0] and hits[0][2] > hits[1][2]
    assert [doc_id for doc_id, _, _ in retriever.search("Seine river Paris", k=1)] == ["seine"]
    assert isinstance(retriever, Retriever)


def test_ids_default_to_positions_and_k_limits():
    retriever = BM25Retriever(DOCUMENTS)
    assert len(retriever) == 5
    assert [doc_id for doc_id, _, _ in retriever.search("Paris capital city largest", k=10)][:2] == ["0", "1"]
    assert len(retriever.search("Paris capital city largest", k=1)) == 1
    assert retriever.search("Paris", k=0) == []


def test_nothing_found():
    retriever = BM25Retriever(DOCUMENTS)
    assert retriever.search("zebra") == [] and retriever.search("?!") == []
    assert BM25Retriever([]).search("Paris") == [] and BM25Retriever(["", "..."]).search("Paris") == []


def test_tiny_corpus_still_returns_matches():
    # with one document every idf is negative: matches are kept even with a score <= 0
    assert [doc_id for doc_id, _, _ in BM25Retriever(["Paris is in France"]).search("Paris")] == ["0"]


def test_ids_must_match_documents():
    with pytest.raises(ValueError, match="2 ids for 5 documents"):
        BM25Retriever(DOCUMENTS, ["a", "b"])


def test_from_jsonl(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [{"doc": "d1", "body": DOCUMENTS[0]}, {"body": DOCUMENTS[3]}, {"doc": "d3", "body": DOCUMENTS[4]}]
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n\n")
    retriever = BM25Retriever.from_jsonl(path, text_field="body", id_field="doc")
    assert retriever.ids == ["d1", "2", "d3"]  # a line without an id: its line number
    assert retriever.search("highest mountain Japan")[0][0] == "2"
