"""Defects found by trying what users do, each with the test that failed before its fix; and hostile input."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.app.cli import main
from orchrm_dagster.app.commands import ingest_files
from orchrm_dagster.storage import StorageRoot, Warehouse, land
from orchrm_dagster.synthetic import generate_runs

from .conftest import write_lines


def records(n: int, seed: int) -> list[dict]:
    return list(generate_runs(n, seed=seed, benchmarks=("gsm8k_test",), samples_per_problem=2))


def query(statement: str):
    result = CliRunner().invoke(main, ["query", "--format", "json", statement])
    return result.exit_code, result.output


def count(statement: str) -> int:
    code, output = query(statement)
    assert code == 0, output
    return next(iter(json.loads(output)[0].values()))


# ---------------------------------------------------------------- pool slots


def test_a_killed_runs_pool_slot_is_given_back(isolated_env):
    import dagster as dg

    from assets.runs import HOST_TAG, PID_TAG, free_slots_of_dead_runs, process_tags
    from orchrm_dagster.app.instance import cli_instance

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    instance = cli_instance()
    storage = instance.event_log_storage
    storage.set_concurrency_slots("warehouse", 1)

    @dg.op
    def step():
        pass

    job = dg.GraphDefinition("g", node_defs=[step]).to_job()
    killed = instance.create_run_for_job(job, tags={PID_TAG: str(dead.pid), HOST_TAG: socket.gethostname()})
    waiting = instance.create_run_for_job(job, tags=process_tags())
    assert storage.claim_concurrency_slot("warehouse", killed.run_id, "step").is_claimed
    assert not storage.claim_concurrency_slot("warehouse", waiting.run_id, "step").is_claimed  # the pool is full
    assert free_slots_of_dead_runs(instance) == [killed.run_id]
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    assert storage.claim_concurrency_slot("warehouse", waiting.run_id, "step").is_claimed


def test_a_live_runs_slot_is_kept(isolated_env):
    import dagster as dg

    from assets.runs import free_slots_of_dead_runs, process_tags
    from orchrm_dagster.app.instance import cli_instance

    instance = cli_instance()
    instance.event_log_storage.set_concurrency_slots("warehouse", 1)
    run = instance.create_run_for_job(dg.GraphDefinition("g", node_defs=[]).to_job(), tags=process_tags())
    instance.event_log_storage.claim_concurrency_slot("warehouse", run.run_id, "step")
    assert free_slots_of_dead_runs(instance) == []


def test_every_pool_has_its_limit_row_before_a_run_claims_a_slot(isolated_env):
    from orchrm_dagster.app.instance import cli_instance

    limits = {p.name: (p.limit, p.from_default) for p in cli_instance().event_log_storage.get_pool_limits()}
    assert limits == {"warehouse": (1, True), "gpu": (1, True), "policy": (1, True)}


def test_a_pool_row_created_by_another_process_meanwhile_is_not_an_error(isolated_env, monkeypatch):
    import dagster as dg
    import sqlalchemy.exc

    from assets.runs import ensure_pool_limits
    from orchrm_dagster.app.instance import ensure_dagster_home

    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    storage = instance.event_log_storage
    create = storage.initialize_concurrency_limit_to_default
    calls = []

    def lose_the_race(pool):  # as on PostgreSQL: the other process's row lands first and our insert fails
        calls.append(pool)
        create(pool)
        raise sqlalchemy.exc.InternalError("INSERT", {}, Exception("current transaction is aborted"))

    monkeypatch.setattr(storage, "initialize_concurrency_limit_to_default", lose_the_race)
    ensure_pool_limits(instance, ("warehouse",))
    assert calls == ["warehouse"]
    assert [(p.name, p.limit) for p in storage.get_pool_limits()] == [("warehouse", 1)]


def test_commands_started_together_on_a_fresh_instance_all_get_it(tmp_path):
    env = {**os.environ, "ORCHRM_STORAGE": str(tmp_path / "storage"), "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    code = "from orchrm_dagster.app.instance import cli_instance; print(len(cli_instance().get_runs()))"
    processes = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [(p.returncode, out.strip()) for p, (out, _) in zip(processes, outputs)] == [(0, "0")] * 4, \
        [err.strip().splitlines()[-1:] for _, err in outputs]


# ---------------------------------------------------------------- batch names


def test_names_that_sanitize_alike_never_share_a_batch(tmp_path):
    defs = build_definitions()
    spaced = write_lines(tmp_path / "a b.jsonl", records(6, 1))
    underscored = write_lines(tmp_path / "a_b.jsonl", records(6, 2))
    outcomes = ingest_files(defs, [spaced, underscored])
    assert [o.status for o in outcomes] == ["SUCCESS", "SUCCESS"]
    assert len({o.batch_id for o in outcomes}) == 2 and [o.runs for o in outcomes] == [6, 6]
    assert count("select count(*) n from runs") == 12


def test_two_files_of_the_same_name_from_two_folders_both_land(tmp_path):
    (tmp_path / "d1").mkdir()
    (tmp_path / "d2").mkdir()
    first = write_lines(tmp_path / "d1" / "runs.jsonl", records(4, 1))
    second = write_lines(tmp_path / "d2" / "runs.jsonl", records(4, 2))
    outcomes = ingest_files(build_definitions(), [first, second])
    assert len({o.batch_id for o in outcomes}) == 2 and count("select count(*) n from runs") == 8
    again = ingest_files(build_definitions(), [first])  # the same source again replaces its own batch
    assert again[0].batch_id == outcomes[0].batch_id and count("select count(*) n from runs") == 8


def test_odd_names_stay_inside_the_landing_zone(tmp_path, storage_root):
    odd = tmp_path / "..☃ odd name [1]*?.jsonl"
    write_lines(odd, records(2, 1))
    landed = land(storage_root, odd)
    assert landed.path.startswith(storage_root.landing_path() + "/") and "/" not in landed.name
    assert landed.batch_id != landed.name and all(c.isalnum() or c in "._-" for c in landed.batch_id)


# ---------------------------------------------------------------- values the tables cannot hold


def test_an_unstorable_value_is_quarantined_and_the_rest_of_the_file_kept(tmp_path):
    good = records(4, 1)
    huge = orjson.dumps(good[0] | {"run_id": "huge"})[:-1] + b',"sample_index": 123456789012345678901234567890}'
    path = write_lines(tmp_path / "mixed.jsonl", [*good[:2], huge, *good[2:]])
    later = write_lines(tmp_path / "later.jsonl", records(2, 9))
    outcomes = ingest_files(build_definitions(), [path, later])
    assert [o.status for o in outcomes] == ["SUCCESS", "SUCCESS"]
    assert (outcomes[0].runs, outcomes[0].quarantined, outcomes[1].runs) == (4, 1, 2)
    code, output = query("select kind, field, line_number from quarantine")
    assert json.loads(output) == [{"kind": "unstorable_value", "field": "sample_index", "line_number": 3}]


# ---------------------------------------------------------------- orchrm query is read-only


WRITES = [
    "copy (select 1 as x) to '{root}/tables/runs/evil.parquet'",
    "copy (select 1) to '{warehouse}'",
    "attach '{root}/other.duckdb' as other",
    "install httpfs",
    "load httpfs",
    "set threads = 1",
    "create table t as select 1",
    "select 1; copy (select 1) to '{root}/x.csv'",
    "select * from read_text('/etc/passwd')",
    "pragma enable_profiling",
]


@pytest.mark.parametrize("statement", WRITES)
def test_query_cannot_write_attach_install_load_copy_set_or_read_outside(statement, tmp_path):
    ingest_files(build_definitions(), [write_lines(tmp_path / "b.jsonl", records(4, 1))])
    root = StorageRoot(os.environ["ORCHRM_STORAGE"])
    warehouse = Warehouse(root)
    before = os.path.getsize(warehouse.path)
    code, output = query(statement.format(root=root.base, warehouse=warehouse.path))
    assert code != 0, output
    assert os.path.getsize(warehouse.path) == before
    assert not os.path.exists(f"{root.base}/tables/runs/evil.parquet") and not os.path.exists(f"{root.base}/x.csv")
    assert count("select count(*) n from runs") == 4


def test_read_statements_still_run(tmp_path):
    ingest_files(build_definitions(), [write_lines(tmp_path / "b.jsonl", records(4, 1))])
    assert count("with r as (select * from runs) select count(*) n from r") == 4
    code, output = query("explain select * from runs")
    assert code == 0, output


# ---------------------------------------------------------------- an open reader never blocks the writer


def test_an_open_reader_does_not_fail_an_ingest(tmp_path):
    defs = build_definitions()
    ingest_files(defs, [write_lines(tmp_path / "first.jsonl", records(4, 1))])
    warehouse = defs.resources["storage"].warehouse()
    # the README's `duckdb storage/warehouse.duckdb -readonly` shell, in a process of its own, reading throughout
    reader = subprocess.Popen([sys.executable, "-c", (
        "import duckdb, sys\n"
        f"con = duckdb.connect({warehouse.path!r}, read_only=True)\n"
        "print(con.execute('select count(*) from runs').fetchone()[0], flush=True)\n"
        "sys.stdin.readline()\n"
        "print(con.execute('select count(*) from runs').fetchone()[0], flush=True)\n")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert reader.stdout.readline().strip() == "4"
    try:
        [outcome] = ingest_files(defs, [write_lines(tmp_path / "second.jsonl", records(4, 2))])
        assert outcome.status == "SUCCESS" and (outcome.runs, outcome.labeled) == (4, 4)
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline().strip() == "4"  # its snapshot still reads
    finally:
        reader.kill()
    assert count("select count(*) n from runs") == 8 and count("select count(*) n from labels") == 8


# ---------------------------------------------------------------- a root whose path holds glob characters


def test_a_root_with_glob_characters_sees_its_runs_and_deduplicates(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCHRM_STORAGE", str(tmp_path / "we[ir]d*?root"))
    good = records(6, 1)
    first = write_lines(tmp_path / "one.jsonl", good[:4])
    second = write_lines(tmp_path / "two.jsonl", good[2:])
    outcomes = ingest_files(build_definitions(), [first, second])
    assert [o.runs for o in outcomes] == [4, 2] and outcomes[1].quarantined == 2  # two already ingested
    assert count("select count(*) n from runs") == 6


# ---------------------------------------------------------------- hostile input


def test_hostile_lines_are_quarantined_with_reasons_and_good_lines_kept(tmp_path):
    good = [orjson.dumps(r) for r in records(4, 1)]
    base = orjson.loads(good[0])
    hostile = [
        b"\xef\xbb\xbf" + good[0],                                        # 1 a BOM before the first record: kept
        b'{"run_id": "bad-utf8 \xff\xfe"}',                               # 2 invalid UTF-8
        b'{"run_id": "nul \x00"}',                                        # 3 a raw NUL byte
        b'{"run_id": "deep", "meta": ' + b"[" * 10000 + b"]" * 10000 + b"}",  # 4 nested 10,000 deep
        orjson.dumps(base | {"run_id": "nan"})[:-1] + b', "plan_logprob": NaN}',       # 5 NaN
        orjson.dumps(base | {"run_id": "inf"})[:-1] + b', "plan_logprob": Infinity}',  # 6 Infinity
        b'{"run_id": "lone \\ud800 surrogate"}',                          # 7 a lone surrogate escape
        b'{"run_id": "big", "x": "' + b"y" * (50 << 20) + b'"}',          # 8 a 50 MB line
        *good[1:],
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(b"\n".join(hostile) + b"\n")
    [outcome] = ingest_files(build_definitions(), [path])
    assert outcome.status == "SUCCESS" and (outcome.runs, outcome.quarantined) == (4, 7)
    code, output = query("select line_number, kind, reason from quarantine order by line_number")
    rows = json.loads(output)
    assert [r["line_number"] for r in rows] == [2, 3, 4, 5, 6, 7, 8]
    assert [r["kind"] for r in rows] == ["malformed_json", "malformed_json", "malformed_json", "unstorable_value",
                                         "unstorable_value", "malformed_json", "oversize_record"]
    assert all(r["reason"].startswith(f"hostile.jsonl:{r['line_number']}: ") for r in rows)


def test_a_corrupt_parquet_batch_is_rejected_with_a_reason(tmp_path):
    path = tmp_path / "corrupt.parquet"
    path.write_bytes(b"PAR1 this is not a parquet file PAR1")
    [outcome] = ingest_files(build_definitions(), [path])
    assert outcome.status == "SUCCESS" and (outcome.runs, outcome.quarantined) == (0, 1)
    code, output = query("select kind, reason from quarantine")
    [row] = json.loads(output)
    assert row["kind"] == "unreadable_file" and "cannot be read" in row["reason"]


def test_a_parquet_batch_of_another_schema_is_quarantined_row_by_row(tmp_path):
    path = tmp_path / "other.parquet"
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), path)
    [outcome] = ingest_files(build_definitions(), [path])
    assert (outcome.runs, outcome.quarantined) == (0, 2)
    code, output = query("select distinct kind from quarantine")
    assert json.loads(output) == [{"kind": "invalid_field"}]
