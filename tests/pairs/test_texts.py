import pyarrow.parquet as pq

from orchrm_dagster.pairs import PairRules, build_pairs, import_published, pair_texts, pair_texts_sql
from orchrm_dagster.pairs.published import export_published

from .helpers import connect
from .test_published import synthetic_runs

COLUMNS = ["pair_id", "split", "source", "question", "chosen_plan", "rejected_plan"]


def _built(tmp_path):
    runs = synthetic_runs()
    con = connect(runs)
    pairs_path = str(tmp_path / "pairs.parquet")
    stats = build_pairs(con, PairRules(), pairs_path)
    con.register("pairs", pq.read_table(pairs_path))
    return con, runs, stats, pairs_path


def test_pair_texts_join_runs_for_question_and_both_plans(tmp_path):
    con, runs, stats, _ = _built(tmp_path)
    texts = pair_texts(con)
    assert texts.columns == COLUMNS
    rows = texts.fetchall()
    assert len(rows) == stats.total
    plans = {r["plan"] for r in runs}
    assert all(chosen in plans and rejected in plans and chosen != rejected for *_, chosen, rejected in rows)


def test_pair_texts_add_imported_pairs_when_present(tmp_path):
    con, _, stats, pairs_path = _built(tmp_path)
    jsonl = str(tmp_path / "published.jsonl")
    export_published(con, pairs_path, jsonl)
    con.register("imported_pairs", import_published(jsonl, PairRules()).table)
    assert len(pair_texts(con).fetchall()) == 2 * stats.total
    assert len(con.sql(pair_texts_sql(include_imported=False)).fetchall()) == stats.total
