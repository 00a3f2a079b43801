import polars as pl
import pyarrow.parquet as pq

from orchrm_dagster.pairs import PAIR_TEXT_COLUMNS, PairRules, build_pairs, export_published, import_published, pair_texts

from .helpers import connect
from .test_published import runs_frame, synthetic_runs


def _built(tmp_path):
    runs = synthetic_runs()
    pairs_path = str(tmp_path / "pairs.parquet")
    stats = build_pairs(connect(runs), PairRules(), pairs_path)
    return runs, stats, pairs_path


def test_pair_texts_join_runs_for_question_and_both_plans(tmp_path):
    runs, stats, pairs_path = _built(tmp_path)
    texts = pair_texts(pl.scan_parquet(pairs_path), runs_frame(runs)).collect()
    assert tuple(texts.columns) == PAIR_TEXT_COLUMNS
    assert texts.height == stats.total
    by_run = {r["run_id"]: r for r in runs}
    built = {p["pair_id"]: p for p in pq.read_table(pairs_path).to_pylist()}
    for row in texts.iter_rows(named=True):
        pair = built[row["pair_id"]]
        chosen, rejected = by_run[pair["chosen_run_id"]], by_run[pair["rejected_run_id"]]
        assert (row["question"], row["chosen_plan"], row["rejected_plan"]) == (
            chosen["question"], chosen["plan"], rejected["plan"])
        assert (row["problem_id"], row["split"], row["source"]) == (pair["problem_id"], pair["split"], pair["source"])


def test_pair_texts_add_imported_pairs_when_given(tmp_path):
    runs, stats, pairs_path = _built(tmp_path)
    jsonl = str(tmp_path / "published.jsonl")
    export_published(pl.scan_parquet(pairs_path), runs_frame(runs), jsonl)
    imported = import_published(jsonl, PairRules()).table.lazy()
    both = pair_texts(pl.scan_parquet(pairs_path), runs_frame(runs), imported).collect()
    assert both.height == 2 * stats.total


def test_pairs_whose_runs_are_gone_are_left_out(tmp_path):
    runs, stats, pairs_path = _built(tmp_path)
    first = pq.read_table(pairs_path).to_pylist()[0]
    kept_runs = [r for r in runs if r["run_id"] != first["chosen_run_id"]]
    texts = pair_texts(pl.scan_parquet(pairs_path), runs_frame(kept_runs)).collect()
    assert 0 < texts.height < stats.total and first["pair_id"] not in set(texts["pair_id"])
