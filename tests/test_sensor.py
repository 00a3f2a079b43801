"""The loop sensor's ingest part: every landed file is asked for once as it is, and again only when replaced."""

import time

import dagster as dg

from assets.sensors import loop_sensor
from orchrm_dagster.glue.resources import LoopResource, StorageResource
from orchrm_dagster.storage import batch_id_for
from tests.conftest import write_lines


def evaluate(storage, instance=None):
    def run(instance):
        context = dg.build_sensor_context(instance=instance, resources={"storage": storage, "loop": LoopResource()})
        return loop_sensor(context)

    if instance is not None:
        return run(instance)
    with dg.instance_for_test() as fresh:
        return run(fresh)


def test_new_files_become_partitions_and_ingest_runs(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    assert not evaluate(storage).run_requests
    storage_root.land(write_lines(tmp_path / "day 1.jsonl", good_records[:3]))
    storage_root.land(write_lines(tmp_path / "day2.jsonl", good_records[3:]))
    (tmp_path / "notes.txt").write_text("not a batch")
    storage_root.fs.put_file(str(tmp_path / "notes.txt"), storage_root.landing_path("notes.txt"))

    result = evaluate(storage)
    spaced = batch_id_for("day 1.jsonl")  # a name with a space gets a safe id that no other name shares
    assert spaced.startswith("day_1.jsonl-") and spaced != "day_1.jsonl"
    assert [r.partition_key for r in result.run_requests] == [spaced, "day2.jsonl"]
    assert {r.job_name for r in result.run_requests} == {"ingest_run_batch"}
    assert sorted(k for r in result.dynamic_partitions_requests for k in r.partition_keys) == sorted([spaced, "day2.jsonl"])


def test_a_replaced_file_is_ingested_again(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    storage_root.land(write_lines(tmp_path / "batch.jsonl", good_records[:3]))
    first = evaluate(storage)
    time.sleep(0.01)
    storage_root.land(write_lines(tmp_path / "batch.jsonl", good_records))
    second = evaluate(storage)
    assert [r.partition_key for r in second.run_requests] == ["batch.jsonl"]
    assert second.run_requests[0].run_key != first.run_requests[0].run_key


def test_a_file_the_cli_already_ingested_is_not_ingested_again(tmp_path, storage_root, good_records):
    from orchrm_dagster.definitions import build_definitions

    storage = StorageResource(root=storage_root.base)
    landed = storage_root.land(write_lines(tmp_path / "cli.jsonl", good_records[:3]))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("run_batches", [landed.batch_id])
        job = build_definitions(storage).resolve_job_def("ingest_run_batch")
        assert job.execute_in_process(partition_key=landed.batch_id, instance=instance).success
        result = evaluate(storage, instance)
    assert all(r.job_name != "ingest_run_batch" for r in result.run_requests)
    assert [r.job_name for r in result.run_requests] == ["rebuild_pairs"]  # what follows an ingest
