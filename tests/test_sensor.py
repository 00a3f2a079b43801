"""The loop sensor's ingest part: the files that land are cut into batches, each asked for once as it is, and again
only when one of its files is replaced."""

import time

import dagster as dg

from assets.config_bridge import from_engine
from assets.resources import LoopResource, StorageResource
from assets.sensors import loop_sensor
from orchrm_dagster.loop import BatchingSettings, LoopSettings
from orchrm_dagster.storage import batch_id_for, land, landing_view
from tests.conftest import drop, orchrm_instance_for_test, write_lines

SETTLED = from_engine(LoopResource, LoopSettings(batching=BatchingSettings(settle_s=0)))  # no drop still landing


def evaluate(storage, instance=None, loop=SETTLED):
    def run(instance):
        context = dg.build_sensor_context(instance=instance, resources={"storage": storage, "loop": loop})
        return loop_sensor(context)

    if instance is not None:
        return run(instance)
    with orchrm_instance_for_test() as fresh:
        return run(fresh)


def test_files_landed_together_become_one_batch_one_partition_and_one_ingest_run(tmp_path, storage_root,
                                                                                   good_records):
    storage = StorageResource(root=storage_root.base)
    assert not evaluate(storage).run_requests
    drop(storage_root, write_lines(tmp_path / "day 1.jsonl", good_records[:3]))
    drop(storage_root, write_lines(tmp_path / "day2.jsonl", good_records[3:]))
    (tmp_path / "notes.txt").write_text("not a batch")
    storage_root.fs.put_file(str(tmp_path / "notes.txt"), storage_root.landing_path("notes.txt"))

    result = evaluate(storage)
    [request] = result.run_requests
    assert request.job_name == "ingest_run_batch" and request.partition_key.startswith("landed-")
    assert request.tags["orchrm/source_file"] == "day 1.jsonl +1 files" and request.tags["orchrm/files"] == "2"
    assert [list(r.partition_keys) for r in result.dynamic_partitions_requests] == [[request.partition_key]]
    [batch] = landing_view(storage_root).batches  # recorded before the run was asked for
    assert batch.batch_id == request.partition_key and [f.name for f in batch.landed] == ["day 1.jsonl", "day2.jsonl"]
    again = evaluate(storage)  # the same batch, asked with the same run key (the daemon runs a key once)
    assert [(r.partition_key, r.run_key) for r in again.run_requests] == [(request.partition_key, request.run_key)]


def test_a_lone_file_is_a_batch_named_after_it(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    drop(storage_root, write_lines(tmp_path / "day 1.jsonl", good_records))
    [request] = evaluate(storage).run_requests
    spaced = batch_id_for("day 1.jsonl")  # a name with a space gets a safe id that no other name shares
    assert spaced.startswith("day_1.jsonl-") and request.partition_key == spaced


def test_a_drop_still_landing_waits_and_says_so(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    drop(storage_root, write_lines(tmp_path / "now.jsonl", good_records))
    result = evaluate(storage, loop=LoopResource())  # settle_s 5: it landed a moment ago
    assert not result.run_requests and "1 landed file(s) (their batch is cut by" in result.skip_reason.skip_message


def test_a_file_landed_by_orchrm_is_a_batch_of_its_own_asked_for_at_once(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    drop(storage_root, write_lines(tmp_path / "dropped.jsonl", good_records[:3]))
    land(storage_root, write_lines(tmp_path / "landed.jsonl", good_records[3:]))  # as `orchrm ingest` and the runner
    result = evaluate(storage, loop=LoopResource())  # settle_s 5: the dropped file waits, the landed one does not
    assert [r.partition_key for r in result.run_requests] == ["landed.jsonl"]


def test_a_replaced_file_is_ingested_again(tmp_path, storage_root, good_records):
    storage = StorageResource(root=storage_root.base)
    land(storage_root, write_lines(tmp_path / "batch.jsonl", good_records[:3]))
    first = evaluate(storage)
    time.sleep(0.01)
    land(storage_root, write_lines(tmp_path / "batch.jsonl", good_records))
    second = evaluate(storage)
    assert [r.partition_key for r in second.run_requests] == ["batch.jsonl"]
    assert second.run_requests[0].run_key != first.run_requests[0].run_key


def test_a_file_the_cli_already_ingested_is_not_ingested_again(tmp_path, storage_root, good_records):
    from orchrm_dagster.definitions import build_definitions

    storage = StorageResource(root=storage_root.base)
    landed = land(storage_root, write_lines(tmp_path / "cli.jsonl", good_records[:3]))
    with orchrm_instance_for_test() as instance:
        instance.add_dynamic_partitions("run_batches", [landed.batch_id])
        job = build_definitions(storage).resolve_job_def("ingest_run_batch")
        assert job.execute_in_process(partition_key=landed.batch_id, instance=instance).success
        result = evaluate(storage, instance)
    assert all(r.job_name != "ingest_run_batch" for r in result.run_requests)
    assert [r.job_name for r in result.run_requests] == ["rebuild_pairs"]  # what follows an ingest


def test_on_a_users_instance_without_orchrms_settings_the_sensor_requests_nothing_and_says_why(
        tmp_path, storage_root, good_records):
    drop(storage_root, write_lines(tmp_path / "a.jsonl", good_records[:4]))
    with dg.instance_for_test() as users:  # its dagster.yaml is the user's: no run monitoring, no pool limit
        skipped = evaluate(StorageResource(root=storage_root.base), users)
    assert isinstance(skipped, dg.SkipReason)
    assert "without run monitoring and a pool limit" in skipped.skip_message
    assert "run_monitoring: {enabled: true}" in skipped.skip_message
