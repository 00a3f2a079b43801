import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import IMPORTED_PAIRS, plan_hash
from orchrm_dagster.pairs import PairRules, build_pairs, export_published, import_published, pair_id, split_for
from orchrm_dagster.synthetic import generate_runs

from .helpers import RUNS, connect, run


def synthetic_runs(n: int = 120) -> list[dict]:
    return [run(r["run_id"], r["problem_id"], r["policy"]["kind"], r["plan"], r["is_correct"])
            | {"question": r["question"]}
            for r in generate_runs(n, seed=5, benchmarks=("gsm8k_test", "hotpotqa_dev"), samples_per_problem=8)]


def runs_frame(runs: list[dict]) -> pl.LazyFrame:
    return pl.from_arrow(pa.Table.from_pylist(runs, schema=RUNS)).lazy()


def test_export_then_import_round_trips_the_pair_texts(tmp_path):
    runs = synthetic_runs()
    pairs_path, jsonl = str(tmp_path / "pairs.parquet"), str(tmp_path / "published.jsonl")
    stats = build_pairs(connect(runs), PairRules(), pairs_path)
    assert export_published(pl.scan_parquet(pairs_path), runs_frame(runs), jsonl) == stats.total > 0
    assert sum(1 for _ in open(jsonl)) == stats.total
    imported = import_published(jsonl, PairRules(), batch_rows=7)
    assert imported.rejected == []
    assert imported.table.columns == IMPORTED_PAIRS.names
    by_run = {r["run_id"]: r for r in runs}
    built = {(by_run[p["chosen_run_id"]]["question"], by_run[p["chosen_run_id"]]["plan"],
              by_run[p["rejected_run_id"]]["plan"], p["source"]) for p in pq.read_table(pairs_path).to_pylist()}
    rows = imported.table.to_dicts()
    assert {(r["question"], r["chosen_plan"], r["rejected_plan"], r["source"]) for r in rows} == built
    built_hashes = {(p["chosen_plan_hash"], p["rejected_plan_hash"]) for p in pq.read_table(pairs_path).to_pylist()}
    assert {(r["chosen_plan_hash"], r["rejected_plan_hash"]) for r in rows} == built_hashes


def test_imported_rows_get_stable_ids_and_the_split_rule(tmp_path):
    path = tmp_path / "published.jsonl"
    path.write_bytes(orjson.dumps({"input": "What is 2+2?", "chosen": "plan one", "rejected": "plan two",
                                   "source": "Specialized-over-Base"}) + b"\n")
    rules = PairRules(validation_fraction=0.5)
    row = import_published(str(path), rules).table.to_dicts()[0]
    assert row["problem_id"] == plan_hash("What is  2+2?")
    assert row["pair_id"] == pair_id(row["problem_id"], plan_hash("plan one"), plan_hash("plan two"))
    assert row["split"] == split_for(row["problem_id"], rules)
    assert row["source"] == "specialized_over_base"


def test_malformed_lines_are_skipped_and_reported_with_line_numbers(tmp_path):
    good = {"input": "q", "chosen": "plan A", "rejected": "plan B", "source": "correct_over_incorrect"}
    lines = [
        orjson.dumps(good),                                          # 1 kept
        b'{"input": "q", "chosen": ',                                # 2 not JSON
        b"[1, 2]",                                                   # 3 not an object
        orjson.dumps({k: v for k, v in good.items() if k != "rejected"}),  # 4 missing field
        orjson.dumps(good | {"chosen": 7}),                          # 5 mistyped
        orjson.dumps(good | {"rejected": " plan\nA "}),              # 6 same plan up to whitespace
        b"",                                                         # 7 blank: ignored
        orjson.dumps(good | {"chosen": "plan  A"}),                  # 8 duplicate of line 1
        orjson.dumps(good | {"input": "  "}),                        # 9 empty field
        orjson.dumps(good | {"rejected": "plan C"}),                 # 10 kept
    ]
    path = tmp_path / "published.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = import_published(str(path), PairRules())
    assert result.table.height == 2
    assert [line.split(": ", 1)[0] for line in result.rejected] == [f"{path}:{n}" for n in (2, 3, 4, 5, 6, 8, 9)]
    reasons = [line.split(": ", 1)[1] for line in result.rejected]
    assert reasons[0].startswith("not JSON")
    assert reasons[1] == "not a JSON object but list"
    assert reasons[2] == "missing field 'rejected'"
    assert reasons[3] == "field 'chosen' is int, not a string"
    assert reasons[4] == "chosen and rejected are the same plan (up to whitespace)"
    assert reasons[5] == "duplicate of line 1"
    assert reasons[6] == "field 'input' is empty"


def test_rules_are_saved_beside_the_pairs_and_read_back(storage_root):
    from orchrm_dagster.pairs import load_rules, save_rules

    rules = PairRules(correct_per_problem=2, validation_fraction=0.3, import_files=("a.jsonl",))
    save_rules(storage_root, rules)
    assert load_rules(storage_root) == rules


def test_reading_rules_before_any_pairs_says_what_to_do(storage_root):
    import pytest

    from orchrm_dagster.pairs import load_rules

    with pytest.raises(FileNotFoundError, match="materialize `pairs`"):
        load_rules(storage_root)
