"""A batch of landed files end to end on one instance: the sensor cuts it, its one run ingests it, a file that cannot
be read fails alone and shows as failed (the `batch_ingested` check, `orchrm status`), and `orchrm reingest FILE`
takes it again."""

import os

import dagster as dg
from click.testing import CliRunner

from assets.resources import StorageResource
from assets.sensors import loop_sensor
from orchrm_dagster.app.cli import main
from orchrm_dagster.app.instance import cli_instance
from orchrm_dagster.storage import StorageRoot
from tests.conftest import drop, write_lines
from tests.test_sensor import SETTLED


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def sensor(storage, instance, cursor=None):
    context = dg.build_sensor_context(instance=instance, resources={"storage": storage, "loop": SETTLED},
                                      cursor=cursor)
    return loop_sensor(context)


def test_a_file_that_cannot_be_read_fails_alone_shows_why_and_is_taken_again(isolated_env, good_records):
    root = StorageRoot(os.environ["ORCHRM_STORAGE"])
    storage = StorageResource(root=root.base)
    for name, records in (("a.jsonl", good_records[:4]), ("b.jsonl", good_records[4:8]),
                          ("c.jsonl", [*good_records[8:], b'{"run_id": "broken"'])):
        drop(root, write_lines(isolated_env / name, records))
    instance = cli_instance()
    [request] = sensor(storage, instance).run_requests  # the three files, cut into one batch
    batch = request.partition_key
    os.remove(root.landing_path("b.jsonl"))  # gone before its batch is ingested

    ingest = invoke("reingest", batch)  # the loop's own ingest step of the batch
    assert ingest.exit_code == 1 and "b.jsonl: FileNotFoundError" in ingest.output
    counts = invoke("query", "--format", "csv", "select source_file, count(*) n from runs group by all order by all")
    assert counts.output == "source_file,n\na.jsonl,4\nc.jsonl,4\n"  # the rest of the batch is in
    status = invoke("status")
    assert "ingested, 1 of 3 files failed" in status.output and "FileNotFoundError" in status.output
    assert "c.jsonl:5: malformed JSON" in status.output  # each file with quarantined lines, its first bad line
    result = sensor(storage, instance)
    [check] = batch_checks(instance)
    assert (check.check_name, check.partition, check.passed) == ("batch_ingested", batch, False)
    assert "b.jsonl" in check.metadata["failed_files"].value and "FileNotFoundError" in check.metadata["cause"].value

    drop(root, write_lines(isolated_env / "b.jsonl", good_records[4:8]))  # back
    again = invoke("reingest", "b.jsonl")  # by the file's name: its batch, read whole again
    assert again.exit_code == 0, again.output
    assert invoke("query", "--format", "csv", "select count(*) n from runs").output == "n\n12\n"
    assert "failed" not in invoke("status").output.split("Files with quarantined lines")[0]
    sensor(storage, instance, result.cursor)
    passed, failed = batch_checks(instance)  # each the verdict on its own ingest run, newest first
    assert (passed.partition, passed.passed, failed.passed) == (batch, True, False)
    sensor(storage, instance, result.cursor)  # told again (the cursor lost): the run's verdict is updated in place
    assert len(batch_checks(instance)) == 2
    runs = instance.get_runs(dg.RunsFilter(job_name="ingest_run_batch"))
    assert len(runs) == 2 and {r.tags["orchrm/files"] for r in runs} == {"3"}


def batch_checks(instance) -> list:
    """The `batch_ingested` evaluations the instance holds, newest first."""
    key = dg.AssetCheckKey(dg.AssetKey("runs"), "batch_ingested")
    history = instance.event_log_storage.get_asset_check_execution_history(key, limit=10)
    return [record.event.dagster_event.event_specific_data for record in history if record.event is not None]
