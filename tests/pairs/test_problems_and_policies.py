"""What the pairs step is told from above (`PairContext`): imported pairs joined to the problems their questions
match, those on a held-out problem left out and counted; and which checkpoints' runs win specialized-over-base pairs,
through the `pairs` asset as a user runs it."""

import json

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from orchrm_dagster.contract import EVALUATION_PROBLEMS, GRPO_ROUNDS, plan_hash
from orchrm_dagster.grpo import held_out_problems, verified_checkpoints
from orchrm_dagster.pairs import (KnownProblems, PairContext, PairRules, build_pairs_table, import_published, pair_id,
                                  question_key, split_for)
from orchrm_dagster.problems import load_shipped
from orchrm_dagster.storage import Warehouse, land, scan_table

AIME = load_shipped("aime24")[0]
MATH = load_shipped("math500")[3]
UNKNOWN = "How many legs do three spiders and a cat have between them?"


def published(path, questions: list[str]) -> str:
    path.write_bytes(b"".join(orjson.dumps({"input": q, "chosen": f"winning plan {i}", "rejected": f"losing plan {i}",
                                            "source": "correct_over_incorrect"}) + b"\n"
                              for i, q in enumerate(questions)))
    return str(path)


def test_the_question_key_ignores_case_spacing_and_unicode_forms():
    assert question_key("  What is\n2 + 2?\u00a0 ") == question_key("WHAT IS 2 + 2?") == "what is 2 + 2?"
    assert question_key("ﬁve") == question_key("five")  # NFKC: the ligature is two letters


def test_an_imported_pair_takes_the_id_of_the_problem_its_question_matches(tmp_path):
    rules = PairRules(validation_fraction=0.5)
    known = KnownProblems.of([(AIME["problem_id"], AIME["question"]), (MATH["problem_id"], MATH["question"])])
    respaced = "\n".join(AIME["question"].upper().split(" "))
    result = import_published(published(tmp_path / "p.jsonl", [respaced, UNKNOWN]), rules, problems=known)
    matched, unknown = result.table.to_dicts()
    assert result.matched == 1 and result.held_out == 0
    assert matched["problem_id"] == AIME["problem_id"] and matched["split"] == split_for(AIME["problem_id"], rules)
    assert matched["pair_id"] == pair_id(AIME["problem_id"], plan_hash("winning plan 0"), plan_hash("losing plan 0"))
    # a question no problem has keeps the stable id it had before: the hash of its text
    assert unknown["problem_id"] == plan_hash(UNKNOWN) and unknown["split"] == split_for(plan_hash(UNKNOWN), rules)


def test_an_imported_pair_on_a_held_out_problem_is_left_out_of_training_and_counted(storage_root, tmp_path):
    path = published(tmp_path / "p.jsonl", [AIME["question"], MATH["question"], UNKNOWN])
    context = PairContext(known_problems=((AIME["problem_id"], AIME["question"]),
                                          (MATH["problem_id"], MATH["question"])),
                          held_out_problems=frozenset({AIME["problem_id"]}))
    outcome = build_pairs_table(storage_root, Warehouse(storage_root), PairRules(import_files=(path,)), context)
    assert (outcome.imported, outcome.imported_matched, outcome.imported_held_out) == (2, 1, 1)
    assert outcome.held_out_examples == [f"{path}:1: {AIME['problem_id']}"]
    kept = scan_table(storage_root, "imported_pairs").collect()
    assert sorted(kept["problem_id"]) == sorted([MATH["problem_id"], plan_hash(UNKNOWN)])


def write_table(root, table: str, rows: list[dict], schema: pa.Schema, batch: str | None = None) -> None:
    path = root.path("staging", f"{table}.parquet")
    root.fs.makedirs(root.path("staging"), exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    if batch is None:
        root.write_table(pq.read_table(path), root.table_file(table))
    else:
        root.replace_batch(table, batch, [path])


def round_row(number: int, promoted: bool, gate: str | None) -> dict:
    return {"round": number, "policy_checkpoint": f"grpo-r{number:04d}", "promoted": promoted, "gate": gate}


def test_only_checkpoints_promoted_on_measured_accuracy_are_verified():
    rounds = [round_row(1, True, "accuracy"), round_row(2, True, "reward_only"), round_row(3, False, "accuracy"),
              round_row(4, True, None), {"round": 5, "policy_checkpoint": None, "promoted": False, "gate": None}]
    assert verified_checkpoints(rounds) == ("grpo-r0001",)
    assert verified_checkpoints([{k: v for k, v in round_row(6, True, "x").items() if k != "gate"}]) == ()


def test_held_out_problems_are_the_evaluations_and_the_rounds(storage_root):
    assert held_out_problems(storage_root) == frozenset()
    write_table(storage_root, "evaluation_problems",
                [{"evaluation_id": "e1", "benchmark": "aime24", "policy": "p", "problem_id": AIME["problem_id"]}],
                EVALUATION_PROBLEMS, batch="e1")
    manifest = storage_root.path("checkpoints", "policy", "r0001", "manifest.json")
    storage_root.fs.makedirs(storage_root.path("checkpoints", "policy", "r0001"), exist_ok=True)
    with storage_root.fs.open(manifest, "w") as out:
        json.dump({"round": 1, "heldout_problems": ["gsm8k-test-1317", "gsm8k-test-1318"]}, out)
    assert held_out_problems(storage_root) == {AIME["problem_id"], "gsm8k-test-1317", "gsm8k-test-1318"}


def grpo_rounds_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{name: row.get(name) for name in GRPO_ROUNDS.names} for row in rows],
                                schema=GRPO_ROUNDS)


def test_the_pairs_asset_puts_only_verified_checkpoints_on_the_specialized_side(tmp_path):
    """A batch with runs of a checkpoint this root never trained, one promoted on reward alone and one promoted on
    measured accuracy, beside specialized and base runs on the same problems; and imported pairs, one on a problem an
    evaluation held out."""
    from orchrm_dagster.definitions import build_definitions
    from orchrm_dagster.app.commands import ingest_files, materialization_metadata, materialize_selection
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    defs = build_definitions()
    root = defs.resources["storage"].storage_root()
    root.write_table(grpo_rounds_table([round_row(1, True, "reward_only"), round_row(2, True, "accuracy")]),
                     root.table_file("grpo_rounds"))
    policies = (("base-orchestrator", "base", None), ("specialized-orchestrator", "specialized", None),
                ("someone-elses-grpo", "checkpoint", 300), ("grpo-r0001", "checkpoint", 1),
                ("grpo-r0002", "checkpoint", 2))
    rates = {"base-orchestrator": 0.7, "specialized-orchestrator": 0.7, "someone-elses-grpo": 0.2,
             "grpo-r0001": 0.2, "grpo-r0002": 0.7}
    batch = tmp_path / "batch.jsonl"
    write_jsonl(generate_runs(400, seed=12, policies=policies, rates=rates, samples_per_problem=10), batch)
    assert ingest_files(defs, [batch])[0].status == "SUCCESS"
    write_table(root, "evaluation_problems",
                [{"evaluation_id": "e1", "benchmark": "aime24", "policy": "p", "problem_id": AIME["problem_id"]}],
                EVALUATION_PROBLEMS, batch="e1")
    imported = published(tmp_path / "imported.jsonl", [AIME["question"], MATH["question"], UNKNOWN])
    result = materialize_selection(defs, 'key:"pairs"', None, {"ops": {"pairs": {"config": {
        "import_files": [imported]}}}})
    assert result.success
    metadata = materialization_metadata(result, "pairs")
    assert (metadata["imported_pairs"], metadata["imported_matched_to_problems"],
            metadata["imported_left_out_held_out"]) == (2, 1, 1)
    policies_table = metadata["policies"]
    assert "| grpo-r0002 | checkpoint |" in policies_table and "| someone-elses-grpo | checkpoint |" in policies_table
    # policy -> its specialized-over-base side: the checkpoint promoted on measured accuracy wins them; one unknown
    # here, or promoted on its reward alone, stands on neither side (correct-over-incorrect pairs only)
    policy_rows = [line.strip("| ").split(" | ") for line in policies_table.splitlines()[2:]]
    sides = {cells[0]: cells[3] for cells in policy_rows}
    assert sides == {"base-orchestrator": "base", "specialized-orchestrator": "specialized",
                     "someone-elses-grpo": "neither", "grpo-r0001": "neither", "grpo-r0002": "specialized"}
    rows = defs.resources["storage"].warehouse().query(
        "select p.source, r.policy_name, count(*) as pairs from pairs p join runs r on r.run_id = p.chosen_run_id "
        "group by all").to_pylist()
    won = {(r["source"], r["policy_name"]): r["pairs"] for r in rows}
    assert won.get(("specialized_over_base", "specialized-orchestrator"), 0) > 0
    assert won.get(("specialized_over_base", "grpo-r0002"), 0) > 0  # promoted on measured accuracy
    assert ("specialized_over_base", "someone-elses-grpo") not in won  # unknown here
    assert ("specialized_over_base", "grpo-r0001") not in won  # promoted on its reward alone
    assert won.get(("correct_over_incorrect", "someone-elses-grpo"), 0) > 0  # its right runs still count


def test_the_same_plans_run_in_two_environments_pair_within_each_and_the_pairs_checks_pass(storage_root, tmp_path):
    import sql
    from orchrm_dagster.ingest import ingest_batch
    from orchrm_dagster.labels import label_batch
    from orchrm_dagster.problems import load_problems, problem_sources, reference_answers
    from orchrm_dagster.synthetic import generate_runs, write_jsonl

    answers = reference_answers(load_problems(problem_sources([])).table)
    for environment in ("agents", "simulated"):  # the same plans and outcomes in both
        path = tmp_path / f"{environment}.jsonl"
        runs = generate_runs(96, seed=4, plans_decide=True, environment=environment)
        write_jsonl(({**r, "run_id": f"{r['run_id']}-{environment}"} for r in runs), path)
        landed = land(storage_root, path)
        ingest_batch(storage_root, landed.batch_id, landed.path)
        label_batch(storage_root, landed.batch_id, answers)
    warehouse = Warehouse(storage_root)
    build_pairs_table(storage_root, warehouse, PairRules())
    warehouse.refresh_views()
    rows = warehouse.query(
        "select c.environment as chosen, r.environment as rejected, count(*) as pairs from pairs p "
        "join runs c on c.run_id = p.chosen_run_id join runs r on r.run_id = p.rejected_run_id "
        "group by all order by all").to_pylist()
    assert [(row["chosen"], row["rejected"]) for row in rows] == [("agents", "agents"), ("simulated", "simulated")]
    both = warehouse.query("select count(*) as n from (select problem_id, chosen_plan_hash, rejected_plan_hash "
                           "from pairs group by all having count(*) = 2)").to_pylist()[0]["n"]
    assert both > 0  # the same plan pair made in each environment, under its own id (a problem's caps span both)
    # the `pairs_unique` check's query: no plan pair repeated within an environment, no pair_id twice
    assert warehouse.query(sql.load("check_pairs_duplicates")).to_pylist() == [
        {"repeated_plan_pairs": 0, "repeated_pair_ids": 0, "identical_plan_pairs": 0}]
