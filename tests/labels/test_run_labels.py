"""Runs labeled honestly: a run without a reference answer is labeled by its own is_correct where its benchmark is
trusted (`LabelSettings.trust_run_labels`), with `labels.label_source` saying so; one neither referenced nor trusted
is left unlabeled and counted where a user looks (the labels report, `orchrm ingest`'s line, `orchrm status`), with
the fix; labeled runs whose plan does not parse are counted too. Real Parquet files on a temporary storage root."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchrm_dagster.contract import LABELS, RUNS, plan_hash
from orchrm_dagster.labels import (REFERENCE_SOURCE, RUN_SOURCE, UNLABELED_FIX, LabelReport, LabelSettings,
                                   answer_type_for, label_batch, unlabeled_note, unparsed_note)
from orchrm_dagster.labels.batch import _label_run, _PlanParses
from orchrm_dagster.problems.table import ReferenceAnswer
from orchrm_dagster.rm import plan_parses
from orchrm_dagster.storage import StorageRoot, Warehouse, scan_table
from orchrm_dagster.synthetic import generate_runs

GOOD_PLAN = next(generate_runs(1, seed=1, benchmarks=("gsm8k_test",), samples_per_problem=1))["plan"]
BAD_PLAN = "<agent>not a plan"


def run_row(run_id, benchmark, *, problem_id=None, reference=None, final="So the answer is \\boxed{4}.",
            is_correct=None, error=None, plan=GOOD_PLAN) -> dict:
    return {"batch_id": "b", "run_id": run_id, "problem_id": problem_id or f"{benchmark}-{run_id}",
            "benchmark": benchmark, "question": "2 + 2?", "policy_name": "p", "policy_kind": "base", "plan": plan,
            "plan_hash": plan_hash(plan), "reference_answer": reference, "final_answer": final,
            "is_correct": is_correct, "error": error}


def write_runs(root: StorageRoot, batch_id: str, rows: list[dict]) -> None:
    path = str(Path(tempfile.mkdtemp(), "runs.parquet"))
    pq.write_table(pa.Table.from_pylist([{**r, "batch_id": batch_id} for r in rows], schema=RUNS), path)
    root.replace_batch("runs", batch_id, [path])


def labels_of(root: StorageRoot, batch_id: str) -> dict[str, dict]:
    rows = pa.concat_tables([pq.read_table(root.fs.open(p, "rb")) for p in root.batch_files("labels", batch_id)])
    return {r["run_id"]: r for r in rows.to_pylist()}


BATCH = [
    run_row("own-right", "team_math", is_correct=True),
    run_row("own-wrong", "team_math", is_correct=False, plan=BAD_PLAN),
    run_row("own-unsure", "team_math"),  # trusted, but no verdict of its own
    run_row("own-failed", "team_math", is_correct=True, error="sub-agent timed out"),
    run_row("own-referenced", "team_math", reference="5", is_correct=True),  # the reference decides: 4 is wrong
    run_row("their-1", "other_team", is_correct=True),
    run_row("their-2", "other_team", is_correct=False),
    run_row("known", "gsm8k", problem_id="gsm8k-test-0000", is_correct=False),  # the problems table's answer: 4
]


def test_a_trusted_benchmark_is_labeled_by_its_runs_own_verdict_and_the_label_says_so(storage_root):
    write_runs(storage_root, "b", BATCH)
    references = {"gsm8k-test-0000": ReferenceAnswer("4", "math", None)}
    report = label_batch(storage_root, "b", references, LabelSettings(trust_run_labels=("team_math",)),
                         plan_parses=plan_parses)
    labels = labels_of(storage_root, "b")
    assert set(labels) == {"own-right", "own-wrong", "own-failed", "own-referenced", "known"}
    source = {run_id: (row["label_source"], row["is_correct"], row["labeler"]) for run_id, row in labels.items()}
    assert source["own-right"] == (RUN_SOURCE, True, "run_is_correct")
    assert source["own-wrong"] == (RUN_SOURCE, False, "run_is_correct")
    assert source["own-failed"] == (RUN_SOURCE, False, "run_is_correct")  # a failed run is incorrect, whatever it says
    assert labels["own-failed"]["reason"] == "execution failed: sub-agent timed out"
    assert source["own-referenced"] == (REFERENCE_SOURCE, False, "math_verify")
    assert labels["own-referenced"]["producer_is_correct"] is True  # kept beside the verdict, as before
    assert source["known"] == (REFERENCE_SOURCE, True, "math_verify")
    # no reference to read a type from: the benchmark's, by its name (its reward-model domain), unless answer_types
    assert labels["own-right"]["reference_answer"] is None
    assert labels["own-right"]["answer_type"] == answer_type_for("team_math", None, None)
    assert [run_id for run_id, row in labels.items() if row["plan_parses"] is False] == ["own-wrong"]

    assert (report.runs, report.labeled, report.unlabeled, report.without_reference) == (8, 5, 3, 6)
    assert report.by_source == Counter({RUN_SOURCE: 3, REFERENCE_SOURCE: 2})
    assert report.unlabeled_by_benchmark == Counter({"other_team": 2, "team_math": 1})
    assert report.trusted_without_verdict == 1 and report.unparsed_plans == 1
    assert (report.producer_verdicts, report.disagreements) == (2, 2)  # the referenced runs only
    assert report.unlabeled_hint() == (
        "3 run(s) unlabeled, without a reference answer (other_team: 2, team_math: 1): add its problem to the "
        "problems table, give runs a reference_answer, or trust its runs' own labels: labels.trust_run_labels; 1 of "
        "them of a trusted benchmark but without an is_correct of their own")

    # the warehouse counts the same, per batch: labeled by source, unlabeled for want of a reference, unparsed plans
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    import sql

    (row,) = warehouse.query(sql.load("batch_status")).to_pylist()
    assert {k: row[k] for k in ("runs", "labeled", "labeled_by_reference", "labeled_by_run", "correct", "unlabeled",
                                "unparsed_plans")} == {"runs": 8, "labeled": 5, "labeled_by_reference": 2,
                                                       "labeled_by_run": 3, "correct": 2, "unlabeled": 3,
                                                       "unparsed_plans": 1}


def test_untrusted_runs_without_a_reference_are_left_unlabeled_as_before(storage_root):
    write_runs(storage_root, "b", BATCH)
    report = label_batch(storage_root, "b", {})
    assert set(labels_of(storage_root, "b")) == {"own-referenced"}
    assert (report.labeled, report.unlabeled, report.trusted_without_verdict) == (1, 7, 0)
    assert report.unparsed_plans == 0 and labels_of(storage_root, "b")["own-referenced"]["plan_parses"] is None


def test_every_benchmark_is_trusted_with_a_star_and_a_blank_name_is_refused():
    everyone = LabelSettings(trust_run_labels=("*",))
    assert everyone.trusts("anything") and everyone.trusts(None)
    assert not LabelSettings().trusts("team_math") and LabelSettings(trust_run_labels=("a",)).trusts("a")
    with pytest.raises(ValueError, match="trust_run_labels"):
        LabelSettings(trust_run_labels=(" ",))


def test_a_labels_file_from_before_label_source_and_plan_parses_still_reads(storage_root):
    old_schema = pa.schema([f for f in LABELS if f.name not in ("label_source", "plan_parses")])
    path = str(Path(tempfile.mkdtemp(), "labels.parquet"))
    pq.write_table(pa.Table.from_pylist([{"batch_id": "old", "run_id": "r1", "problem_id": "p", "benchmark": "gsm8k",
                                          "is_correct": True, "labeler": "math_verify"}], schema=old_schema), path)
    storage_root.replace_batch("labels", "old", [path])
    write_runs(storage_root, "old", [run_row("r1", "gsm8k", reference="4")])
    warehouse = Warehouse(storage_root)
    warehouse.refresh_views()
    (row,) = warehouse.query("select run_id, label_source, plan_parses from labels").to_pylist()
    assert row == {"run_id": "r1", "label_source": "reference", "plan_parses": None}  # only references labeled then
    frame = scan_table(storage_root, "labels").collect()
    assert frame["label_source"].to_list() == ["reference"] and frame["plan_parses"].to_list() == [None]
    import sql

    (status,) = warehouse.query(sql.load("batch_status")).to_pylist()
    assert (status["labeled_by_reference"], status["labeled_by_run"], status["unparsed_plans"]) == (1, 0, 0)


def test_each_distinct_plan_is_parsed_once():
    seen = []
    parses = _PlanParses(lambda plan: seen.append(plan) or plan == GOOD_PLAN)
    assert [parses(p, plan_hash(p)) for p in (GOOD_PLAN, BAD_PLAN, GOOD_PLAN, BAD_PLAN)] == [True, False, True, False]
    assert seen == [GOOD_PLAN, BAD_PLAN] and _PlanParses(None)(GOOD_PLAN, "h") is None


def test_the_notes_say_the_count_the_benchmarks_and_the_fix():
    assert unlabeled_note(2) == ("2 run(s) unlabeled, without a reference answer: " + UNLABELED_FIX)
    many = unlabeled_note(21, {f"b{i}": i for i in range(1, 7)})
    assert many.startswith("21 run(s) unlabeled, without a reference answer (b6: 6, b5: 5, b4: 4, b3: 3, b2: 2, ...)")
    assert unparsed_note(3) == ("3 labeled run(s) with a plan that does not parse: best-of-N ranks such a plan "
                                "after every plan that parses")


def test_the_ingest_line_reports_runs_labeled_by_themselves_unlabeled_runs_and_unparsed_plans():
    from orchrm_dagster.app.commands import BatchOutcome

    plain = BatchOutcome("b", "SUCCESS", "r", 48, 6, 48, 30)
    assert plain.summary() == "48 runs, 6 quarantined, 48 labeled, 30 correct"  # as before when all is well
    told = BatchOutcome("b", "SUCCESS", "r", 10, 0, 6, 3, (("x.jsonl", "gone"),), labeled_by_run=6, unlabeled=4,
                        unparsed_plans=1, unlabeled_benchmarks=(("other_bench", 4),))
    assert told.summary() == (
        "10 runs, 0 quarantined, 6 labeled (6 by the runs' own is_correct), 3 correct; 4 run(s) unlabeled, without a "
        "reference answer (other_bench: 4): add its problem to the problems table, give runs a reference_answer, or "
        "trust its runs' own labels: labels.trust_run_labels; 1 labeled run(s) with a plan that does not parse: "
        "best-of-N ranks such a plan after every plan that parses; x.jsonl FAILED: gone")


# ---- properties: whatever the runs say, every run is labeled once or counted unlabeled, by the right source

_benchmarks = st.sampled_from(["team_math", "other_team", "gsm8k", "x y", ""])
_runs = st.lists(st.fixed_dictionaries({
    "run_id": st.text(min_size=1, max_size=8), "problem_id": st.sampled_from(["known", "p1", "p2"]),
    "benchmark": _benchmarks, "reference_answer": st.one_of(st.none(), st.just(""), st.sampled_from(["4", "Paris"])),
    "final_answer": st.one_of(st.none(), st.sampled_from(["4", "\\boxed{4}", "Paris", ""])),
    "error": st.one_of(st.none(), st.just(""), st.text(min_size=1, max_size=10)),
    "is_correct": st.one_of(st.none(), st.booleans()),
    "plan": st.sampled_from([GOOD_PLAN, BAD_PLAN, ""]),
}), max_size=30)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=_runs, trusted=st.lists(st.sampled_from(["team_math", "other_team", "*", "gsm8k"]), max_size=2))
def test_every_run_is_labeled_by_the_right_source_or_counted_unlabeled(runs, trusted):
    settings_ = LabelSettings(trust_run_labels=tuple(trusted))
    references = {"known": ReferenceAnswer("4", "math", None)}
    report = LabelReport("b")
    parses = _PlanParses(plan_parses)
    rows = []
    for run in runs:
        run = {**run, "plan_hash": plan_hash(run["plan"])}
        row = _label_run(run, "b", references, settings_, report, parses)
        referenced = bool(run["reference_answer"]) or run["problem_id"] == "known"
        if row is None:
            assert not referenced
            assert not settings_.trusts(run["benchmark"]) or (run["is_correct"] is None and not run["error"])
            continue
        rows.append(row)
        assert row["label_source"] == (REFERENCE_SOURCE if referenced else RUN_SOURCE)
        assert row["producer_is_correct"] is run["is_correct"]
        if row["label_source"] == RUN_SOURCE:
            assert settings_.trusts(run["benchmark"])
            assert row["is_correct"] is (bool(run["is_correct"]) and not run["error"])
        assert row["plan_parses"] is (run["plan"] == GOOD_PLAN)
        assert set(row) == set(LABELS.names)
    assert report.runs == len(runs) == report.labeled + report.unlabeled
    assert report.labeled == len(rows) == sum(report.by_source.values())
    assert sum(report.unlabeled_by_benchmark.values()) == report.unlabeled
    assert report.unparsed_plans == sum(not r["plan_parses"] for r in rows)
    assert report.correct == sum(r["is_correct"] for r in rows)
    pa.Table.from_pylist(rows, schema=LABELS)  # every row is storable as the contract has it


# ---- what the user sees: `orchrm ingest`'s line and `orchrm status`, then the same batch trusted

def invoke(*args):
    from orchrm_dagster.app.cli import main

    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_ingest_and_status_report_unlabeled_runs_and_then_the_runs_labeled_by_themselves(isolated_env):
    runs = []
    for i, run in enumerate(generate_runs(10, seed=3, benchmarks=("gsm8k_test",), samples_per_problem=1)):
        run.pop("reference_answer", None)
        runs.append({**run, "run_id": f"mine-{i}", "problem_id": f"mine-p{i}", "is_correct": i % 2 == 0,
                     "benchmark": "team_bench" if i < 6 else "other_bench", "plan": BAD_PLAN if i == 0 else run["plan"]})
    landed = isolated_env / "mine.jsonl"
    landed.write_text("".join(json.dumps(r, default=str) + "\n" for r in runs))

    ingested = invoke("ingest", str(landed))
    assert ingested.exit_code == 0, ingested.output
    assert ("ingesting mine.jsonl" in ingested.output and ": 10 runs, 0 quarantined, 0 labeled, 0 correct; 10 run(s) "
            "unlabeled, without a reference answer (team_bench: 6, other_bench: 4): add its problem to the problems "
            "table, give runs a reference_answer, or trust its runs' own labels: labels.trust_run_labels"
            in " ".join(ingested.output.split())), ingested.output
    status = invoke("status")
    assert status.exit_code == 0, status.output
    assert ("10 run(s) unlabeled, without a reference answer (team_bench: 6, other_bench: 4): add its problem to the "
            "problems table" in " ".join(status.output.split())), status.output
    assert "by reference" in status.output and "by run" in status.output and "unparsed plans" in status.output
    as_json = json.loads(invoke("status", "--format", "json").output)
    (batch,) = as_json["batches"]
    assert (batch["labeled"], batch["unlabeled"], batch["labeled_by_run"]) == (0, 10, 0)
    assert as_json["labels"] == {"unlabeled": 10, "unlabeled_by_benchmark": {"team_bench": 6, "other_bench": 4},
                                 "unlabeled_fix": UNLABELED_FIX, "unparsed_plans": 0}

    config = isolated_env / "trust.yaml"
    config.write_text("ops:\n  labels:\n    config:\n      trust_run_labels: [team_bench]\n")
    relabeled = invoke("materialize", "labels", "--partition", "mine.jsonl", "--config", str(config))
    assert relabeled.exit_code == 0, relabeled.output
    as_json = json.loads(invoke("status", "--format", "json").output)
    (batch,) = as_json["batches"]
    assert {k: batch[k] for k in ("labeled", "labeled_by_reference", "labeled_by_run", "correct", "unlabeled",
                                  "unparsed_plans")} == {"labeled": 6, "labeled_by_reference": 0, "labeled_by_run": 6,
                                                         "correct": 3, "unlabeled": 4, "unparsed_plans": 1}
    assert as_json["labels"]["unlabeled_by_benchmark"] == {"other_bench": 4}
    status = " ".join(invoke("status").output.split())
    assert "4 run(s) unlabeled, without a reference answer (other_bench: 4)" in status
    assert ("1 labeled run(s) with a plan that does not parse: best-of-N ranks such a plan after every plan that "
            "parses") in status


def test_a_run_that_failed_outside_its_plan_has_no_verdict_and_one_whose_plan_failed_is_wrong(storage_root):
    """A failure of the endpoint, a sub-agent or the time budget (meta.error_kind in NO_VERDICT_KINDS) is a failed run
    with its cause, never a wrong answer: its label row leaves is_correct unset, so no pair, pool or accuracy counts
    it; a plan that does not parse, or a failure whose kind the run does not say, stays incorrect."""
    def failed(run_id, kind, trusted=False):
        meta = json.dumps({"error_kind": kind}) if kind else None
        row = run_row(run_id, "team_math" if trusted else "gsm8k", problem_id=None if trusted else "gsm8k-test-0000",
                      is_correct=True if trusted else None, error=f"{kind or 'it'} failed", final=None)
        return {**row, "meta": meta}

    write_runs(storage_root, "b", [failed("endpoint", "agent_failed"), failed("slow", "timeout"),
                                   failed("bad-plan", "plan_unparseable"), failed("unsaid", None),
                                   failed("trusted-timeout", "timeout", trusted=True)])
    references = {"gsm8k-test-0000": ReferenceAnswer("4", "math", None)}
    report = label_batch(storage_root, "b", references, LabelSettings(trust_run_labels=("team_math",)))
    labels = labels_of(storage_root, "b")
    assert {run: label["is_correct"] for run, label in labels.items()} == {
        "endpoint": None, "slow": None, "trusted-timeout": None, "bad-plan": False, "unsaid": False}
    assert "execution failed (timeout), no verdict" in labels["slow"]["reason"]
    assert (report.failed_runs, report.labeled, report.correct) == (3, 2, 0)
    assert report.failed_by_kind == Counter({"timeout": 2, "agent_failed": 1})
    status = Warehouse(storage_root)
    status.refresh_views(("runs", "labels", "problems", "quarantine"))
    import sql

    row = next(r for r in status.query(sql.load("batch_status")).to_pylist() if r["batch_id"] == "b")
    assert (row["labeled"], row["failed_runs"], row["correct"]) == (2, 3, 0)
