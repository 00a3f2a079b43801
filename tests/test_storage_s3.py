"""The same code path against a real S3 protocol server (moto, threaded, on loopback) through s3fs."""

import dagster as dg

from assets.resources import StorageResource
from orchrm_dagster.definitions import build_definitions
from orchrm_dagster.storage import land
from tests.conftest import orchrm_instance_for_test, write_lines


def test_ingest_label_and_query_on_s3(tmp_path, s3_endpoint, good_records):
    storage = StorageResource(root="s3://orchrm-test/team-a", s3_endpoint_url=s3_endpoint,
                              warehouse_path=str(tmp_path / "wh.duckdb"))
    root = storage.storage_root()
    root.fs.mkdir("orchrm-test")
    lines = [*good_records, {"run_id": "x"}]
    landed = land(root, write_lines(tmp_path / "s3batch.jsonl", lines))
    assert root.landed_files()[0].name == "s3batch.jsonl"

    defs = build_definitions(storage)
    with orchrm_instance_for_test() as instance:
        instance.add_dynamic_partitions("run_batches", [landed.batch_id])
        job = defs.resolve_job_def("ingest_run_batch")
        assert job.execute_in_process(partition_key=landed.batch_id, instance=instance).success
        assert job.execute_in_process(partition_key=landed.batch_id, instance=instance).success  # idempotent

    [part] = root.batch_files("runs", "s3batch.jsonl")  # one generation: the second ingest replaced the first
    assert part.startswith("orchrm-test/team-a/tables/runs/batch_id=s3batch.jsonl/g") and root.fs.exists(part)
    with storage.warehouse().connect() as con:
        assert con.execute("select count(*) from runs").fetchone() == (12,)
        assert con.execute("select count(*) from quarantine").fetchone() == (1,)
        assert con.execute("select count(*) from labels").fetchone() == (12,)
