import orjson

from orchrm_dagster.problems import load_problems, problem_sources, reference_answers


def test_shipped_benchmarks_load_with_answer_types():
    loaded = load_problems(problem_sources([]))
    assert loaded.rejected == []
    counts = {}
    for row in loaded.table.select(["benchmark", "answer_type"]).to_pylist():
        counts[(row["benchmark"], row["answer_type"])] = counts.get((row["benchmark"], row["answer_type"]), 0) + 1
    assert counts == {("aime24", "math"): 30, ("aime25", "math"): 30, ("gsm8k", "math"): 1319,
                      ("math500", "math"): 500, ("hotpotqa", "qa"): 500}


def test_user_file_adds_problems_and_reports_bad_lines(tmp_path):
    user = tmp_path / "mine.jsonl"
    user.write_bytes(b"\n".join([
        orjson.dumps({"problem_id": "mc-1", "benchmark": "gpqa", "question": "Pick", "answer": "B",
                      "choices": ["one", "two", "three", "four"]}),
        orjson.dumps({"problem_id": "mc-2", "benchmark": "gpqa", "question": "Pick"}),
        orjson.dumps({"problem_id": "gsm8k-test-0000", "benchmark": "gsm8k", "question": "dup", "answer": "1"}),
    ]))
    loaded = load_problems(problem_sources([str(user)], shipped=("gsm8k_test",)))
    assert loaded.table.num_rows == 1320
    assert loaded.rejected[0].startswith("mine.jsonl:2: answer")
    assert "already loaded from gsm8k_test.jsonl:1" in loaded.rejected[1]
    refs = reference_answers(loaded.table)
    assert refs["mc-1"].answer_type == "choice" and refs["mc-1"].choices == ("one", "two", "three", "four")
