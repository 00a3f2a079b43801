import duckdb
import pyarrow.parquet as pq
import pytest

from orchrm_dagster.contract import plan_hash
from orchrm_dagster.contract import PAIRS
from orchrm_dagster.pairs import (CORRECT_OVER_INCORRECT, SPECIALIZED_OVER_BASE, PairRules, build_pairs,
                                  pair_id, sample_rank, split_for)

from .helpers import build, connect, correct_filler, pair_runs, run, specialized_filler

SOB, COI = SPECIALIZED_OVER_BASE, CORRECT_OVER_INCORRECT


def test_specialized_and_verified_checkpoint_plans_beat_base_plans(tmp_path):
    runs = [run("b1", "p", "base", "plan B1"), run("b2", "p", "base", "plan B2"),
            run("s1", "p", "specialized", "plan S"), run("c1", "p", "checkpoint", "plan C", policy="grpo-r0001")]
    stats, rows = build(runs + correct_filler(2), tmp_path, verified_checkpoints=("grpo-r0001",))
    assert pair_runs(rows, "p", SOB) == {("s1", "b1"), ("s1", "b2"), ("c1", "b1"), ("c1", "b2")}
    assert stats.candidates[SOB] == 4
    assert {(p.name, p.side) for p in stats.policies} >= {("grpo-r0001", "specialized"), ("base-policy", "base")}


def test_an_unverified_checkpoint_wins_no_specialized_pair_but_its_runs_still_make_correct_pairs(tmp_path):
    # grpo-r0002 was promoted on reward alone (or is unknown here): only grpo-r0001 is verified
    runs = [run("b1", "p", "base", "plan B1", correct=False), run("b2", "p", "base", "plan B2"),
            run("s1", "p", "specialized", "plan S"),
            run("c1", "p", "checkpoint", "plan C1", correct=True, policy="grpo-r0002"),
            run("c2", "p", "checkpoint", "plan C2", policy="someone-elses-checkpoint")]
    stats, rows = build(runs + specialized_filler(2) + correct_filler(2), tmp_path,
                        verified_checkpoints=("grpo-r0001",))
    assert pair_runs(rows, "p", SOB) == {("s1", "b1"), ("s1", "b2")}
    assert pair_runs(rows, "p", COI) == {("c1", "b1")}
    sides = {p.name: (p.kind, p.runs, p.side) for p in stats.policies}
    assert sides["grpo-r0002"] == ("checkpoint", 1, "neither")
    assert sides["someone-elses-checkpoint"] == ("checkpoint", 1, "neither")
    assert sides["specialized-policy"] == ("specialized", 25, "specialized")  # s1 and the filler's 24


def test_a_pair_never_mixes_environments_and_each_environment_pairs_on_its_own(tmp_path):
    runs = [run("b-agents", "p", "base", "plan B", correct=False),
            run("s-simulated", "p", "specialized", "plan S", environment="simulated"),
            run("ok-simulated", "p", "specialized", "plan OK", correct=True, environment="simulated"),
            # the same two plans in both environments: two pairs, one per environment, with their own ids
            run("x-agents", "q", "base", "plan X", correct=True), run("y-agents", "q", "base", "plan Y", correct=False),
            run("x-simulated", "q", "base", "plan X", correct=True, environment="simulated"),
            run("y-simulated", "q", "base", "plan Y", correct=False, environment="simulated")]
    environment = {r["run_id"]: r["environment"] or "agents" for r in runs}
    _, rows = build(runs + specialized_filler(1), tmp_path)
    assert rows and all(environment.get(r["chosen_run_id"], "agents") == environment.get(r["rejected_run_id"], "agents")
                        for r in rows)
    assert pair_runs(rows, "p", SOB) == set()  # the only base plan of p ran on agents, the specialized one simulated
    assert pair_runs(rows, "p", COI) == set()
    assert pair_runs(rows, "q", COI) == {("x-agents", "y-agents"), ("x-simulated", "y-simulated")}
    q = {environment[r["chosen_run_id"]]: r["pair_id"] for r in rows if r["problem_id"] == "q"}
    assert q["agents"] == pair_id("q", plan_hash("plan X"), plan_hash("plan Y"))
    assert q["simulated"] == pair_id("q", plan_hash("plan X"), plan_hash("plan Y"), "simulated") != q["agents"]


def test_correct_beats_incorrect_for_any_policy_and_unlabeled_runs_take_no_part(tmp_path):
    runs = [run("x", "p", "specialized", "plan X", correct=True),
            run("y", "p", "checkpoint", "plan Y", correct=False, policy="grpo-r0001"),
            run("z", "p", "base", "plan Z", correct=True), run("u", "p", "base", "plan U"),
            run("w", "p", "base", "plan W", correct=False)]
    stats, rows = build(runs + specialized_filler(2), tmp_path, verified_checkpoints=("grpo-r0001",))
    assert pair_runs(rows, "p", COI) == {("x", "y"), ("x", "w"), ("z", "w")}  # z > y conflicts with y > z
    assert stats.conflicts == 1
    assert not {"u"} & {r for pair in pair_runs(rows, "p", COI) for r in pair}


def test_runs_with_disagreeing_labels_count_as_unlabeled(tmp_path):
    runs = [run("a", "p", "base", "plan A", correct=True), run("b", "p", "base", "plan B", correct=False),
            run("c", "p", "base", "plan C", correct=False)]
    _, rows = build(runs + specialized_filler(1), tmp_path, extra_labels=[{"run_id": "c", "is_correct": True}])
    assert pair_runs(rows, "p", COI) == {("a", "b")}


def test_identical_plans_are_never_paired(tmp_path):
    runs = [run("b", "p", "base", "plan A"), run("s", "p", "specialized", "plan  A\n"),
            run("t", "p", "specialized", "plan T"),
            run("ok", "q", "base", "plan Q", correct=True), run("ko", "q", "base", " plan\tQ", correct=False)]
    stats, rows = build(runs + correct_filler(1), tmp_path)
    assert all(r["chosen_plan_hash"] != r["rejected_plan_hash"] for r in rows)
    assert pair_runs(rows, "p", SOB) == {("t", "b")}
    assert pair_runs(rows, "q", COI) == set()
    assert stats.identical_plans_skipped == 2


def test_a_pair_supported_by_both_sources_is_written_once_as_correct_over_incorrect(tmp_path):
    runs = [run("a", "p", "specialized", "plan A", correct=True), run("b", "p", "base", "plan B", correct=False)]
    stats, rows = build(runs + specialized_filler(1), tmp_path)
    assert [(r["source"], r["chosen_run_id"], r["rejected_run_id"]) for r in rows if r["problem_id"] == "p"] == [
        (COI, "a", "b")]
    assert len({r["pair_id"] for r in rows}) == len(rows)


def test_duplicate_plans_collapse_to_one_pair_with_the_lowest_run_ids(tmp_path):
    runs = [run("b2", "p", "base", "plan B"), run("b1", "p", "base", "plan  B"),
            run("s3", "p", "specialized", "plan S"), run("s2", "p", "checkpoint", "plan S ", policy="grpo-r0001")]
    _, rows = build(runs + correct_filler(1), tmp_path, verified_checkpoints=("grpo-r0001",))
    assert pair_runs(rows, "p", SOB) == {("s2", "b1")}
    assert len([r for r in rows if r["problem_id"] == "p"]) == 1


def test_pairs_preferred_both_ways_across_sources_are_dropped_and_counted(tmp_path):
    runs = [run("a", "p", "specialized", "plan A", correct=False), run("b", "p", "base", "plan B", correct=True),
            run("c", "p", "base", "plan C", correct=False)]
    stats, rows = build(runs + specialized_filler(5) + correct_filler(4), tmp_path)
    assert pair_runs(rows, "p", SOB) == {("a", "c")}
    assert pair_runs(rows, "p", COI) == {("b", "c")}
    assert stats.conflicts == 1


def test_pairs_preferred_both_ways_within_a_source_are_dropped(tmp_path):
    # Plans A and B were each written by both a specialized and a base run: A > B and B > A.
    runs = [run("a1", "p", "specialized", "plan A"), run("a2", "p", "base", "plan A"),
            run("b1", "p", "checkpoint", "plan B", policy="grpo-r0001"), run("b2", "p", "base", "plan B"),
            run("c", "p", "base", "plan C")]
    stats, rows = build(runs + correct_filler(2), tmp_path, verified_checkpoints=("grpo-r0001",))
    assert pair_runs(rows, "p", SOB) == {("a1", "c"), ("b1", "c")}
    assert stats.conflicts == 1
    assert stats.identical_plans_skipped == 2


def test_per_problem_caps(tmp_path):
    runs = [run("base", "p", "base", "base plan")]
    runs += [run(f"s{i:02d}", "p", "specialized", f"plan {i}") for i in range(20)]
    runs += [run("ok", "q", "base", "right", correct=True)]
    runs += [run(f"x{i}", "q", "base", f"wrong {i}", correct=False) for i in range(10)]
    rules = PairRules(specialized_per_problem=6, correct_per_problem=2)
    stats, rows = build(runs, tmp_path, rules)
    assert stats.candidates == {SOB: 20, COI: 10}
    assert stats.after_caps == {SOB: 6, COI: 2}
    assert stats.by_source == {SOB: 6, COI: 2}


@pytest.mark.parametrize(("specialized_problems", "correct_problems", "expected"), [
    (10, 10, {SOB: 120, COI: 40}),  # exactly 3:1: nothing cut
    (10, 5, {SOB: 60, COI: 20}),  # specialized over-represented
    (1, 10, {SOB: 12, COI: 4}),  # correct over-represented
    (3, 0, {SOB: 36, COI: 0}),  # no correct pairs at all: no ratio to keep
    (0, 2, {SOB: 0, COI: 8}),
])
def test_mix_keeps_at_most_three_specialized_per_correct(tmp_path, specialized_problems, correct_problems, expected):
    runs = specialized_filler(specialized_problems) + correct_filler(correct_problems)
    stats, rows = build(runs, tmp_path)
    assert stats.by_source == expected


@pytest.mark.parametrize(("correct_problems", "kept_per_problem"), [(5, [6] * 10), (3, [3] * 4 + [4] * 6)])
def test_a_cut_source_keeps_every_problems_first_pairs_before_any_problems_later_ones(
        tmp_path, correct_problems, kept_per_problem):
    # 120 specialized pairs cut to 3 per correct pair: 60 (6 per problem) or 36 (3 each, then 6 problems a 4th).
    stats, rows = build(specialized_filler(10) + correct_filler(correct_problems), tmp_path)
    per_problem = {}
    for r in rows:
        if r["source"] == SOB:
            per_problem[r["problem_id"]] = per_problem.get(r["problem_id"], 0) + 1
    assert sorted(per_problem.values()) == kept_per_problem


def test_caps_keep_the_lowest_sample_ranks(tmp_path):
    runs = specialized_filler(6) + correct_filler(12)
    rules = PairRules(specialized_per_problem=3, seed=7)
    _, rows = build(runs, tmp_path, rules)
    for p in range(6):
        problem = f"filler-s-{p}"
        base = plan_hash(f"base plan of {problem}")
        candidates = [plan_hash(f"plan {i} of {problem}") for i in range(12)]
        expected = sorted(candidates, key=lambda h: (sample_rank(7, h, base), h))[:3]
        assert sorted(r["chosen_plan_hash"] for r in rows if r["problem_id"] == problem) == sorted(expected)


def _random_problems(count: int) -> list[dict]:
    runs = []
    for p in range(count):
        problem = f"problem-{p:03d}"
        runs += [run(f"{problem}-b{i}", problem, "base", f"base {i} {problem}", correct=i % 2 == 0) for i in range(5)]
        runs += [run(f"{problem}-s{i}", problem, "specialized", f"spec {i} {problem}", correct=i % 3 != 0)
                 for i in range(6)]
    return runs


def test_same_seed_same_output_and_another_seed_samples_differently(tmp_path):
    runs = _random_problems(30)
    rules = PairRules(specialized_per_problem=4, correct_per_problem=2)
    first = build(runs, tmp_path, rules, "a.parquet")[1]
    again = build(list(reversed(runs)), tmp_path, rules, "b.parquet")[1]
    other = build(runs, tmp_path, PairRules(specialized_per_problem=4, correct_per_problem=2, seed=1), "c.parquet")[1]
    assert first == again
    assert {r["pair_id"] for r in first} != {r["pair_id"] for r in other}


def test_split_is_by_problem_and_follows_the_stable_rule(tmp_path):
    rules = PairRules(validation_fraction=0.3)
    _, rows = build(_random_problems(60), tmp_path, rules)
    splits = {}
    for r in rows:
        splits.setdefault(r["problem_id"], set()).add(r["split"])
    assert all(len(s) == 1 for s in splits.values())
    assert {problem: s.pop() for problem, s in splits.items()} == {p: split_for(p, rules) for p in splits}
    assert {"train", "validation"} == {r["split"] for r in rows}


@pytest.mark.parametrize(("fraction", "split"), [(0.0, "train"), (1.0, "validation")])
def test_split_fraction_extremes(tmp_path, fraction, split):
    _, rows = build(_random_problems(10), tmp_path, PairRules(validation_fraction=fraction))
    assert {r["split"] for r in rows} == {split}


def test_pair_id_is_a_stable_hash_of_problem_and_plans(tmp_path):
    runs = _random_problems(3)
    _, rows = build(runs, tmp_path, PairRules(specialized_per_problem=100, correct_per_problem=100), "a.parquet")
    assert all(r["pair_id"] == pair_id(r["problem_id"], r["chosen_plan_hash"], r["rejected_plan_hash"]) for r in rows)
    more_problems = _random_problems(5)[len(runs):]
    renamed = [r | {"run_id": "other-" + r["run_id"]} for r in runs] + more_problems
    _, again = build(renamed, tmp_path, PairRules(specialized_per_problem=100, correct_per_problem=100), "b.parquet")
    ids = {(r["pair_id"], r["source"]) for r in rows}
    assert ids <= {(r["pair_id"], r["source"]) for r in again}
    assert len({r["pair_id"] for r in rows}) == len(rows)


def test_no_runs_gives_an_empty_pairs_file_with_the_pairs_schema(tmp_path):
    stats, rows = build([], tmp_path)
    assert rows == [] and stats.total == 0 and stats.problems == 0
    assert pq.read_schema(tmp_path / "pairs.parquet").names == PAIRS.names


def test_connection_settings_are_restored_and_temp_tables_dropped(tmp_path):
    con = connect(_random_problems(2))
    before = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0]
    build_pairs(con, PairRules(), str(tmp_path / "pairs.parquet"), memory_limit="1GB")
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0] == before
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchall()[0] == (0,)


def test_rules_reject_impossible_settings():
    with pytest.raises(ValueError):
        PairRules(mix_correct=0)
    with pytest.raises(ValueError):
        PairRules(validation_fraction=1.5)
    with pytest.raises(ValueError):
        PairRules(correct_per_problem=0)


def test_build_reads_no_plan_texts(tmp_path):
    """Runs whose plan column is missing entirely still build: the build never touches plan texts."""
    con = connect(_random_problems(3))
    runs_without_plans = con.table("runs").arrow().read_all().drop_columns(["plan"])
    con.register("runs", runs_without_plans)
    assert build_pairs(con, PairRules(), str(tmp_path / "pairs.parquet")).total > 0


def test_duckdb_error_for_missing_relations_is_raised(tmp_path):
    with pytest.raises(duckdb.CatalogException):
        build_pairs(duckdb.connect(), PairRules(), str(tmp_path / "pairs.parquet"))


def test_a_run_that_failed_outside_its_plan_stands_on_no_side(tmp_path):
    """A specialized run whose endpoint timed out (a label without a verdict) says nothing of its plan: it wins no
    specialized-over-base pair, as it takes no part in correct-over-incorrect ones."""
    runs = [run("b1", "p", "base", "plan B", correct=True), run("s1", "p", "specialized", "plan S1"),
            run("s2", "p", "specialized", "plan S2")]
    no_verdict = [{"run_id": "s1", "is_correct": None}]  # labels.batch.failed_run_verdict of a NO_VERDICT kind
    stats, rows = build(runs + specialized_filler(2) + correct_filler(2), tmp_path, extra_labels=no_verdict)
    assert pair_runs(rows, "p", SOB) == {("s2", "b1")}
