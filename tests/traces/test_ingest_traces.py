"""Trace files in the landing zone are ingested like any run batch: each trace a run, or a quarantine row naming the
file, the trace's position, its trace id and the reason; `orchrm import-traces` lands them there and ingests them,
with the mapping's flags."""

import json
import shutil

from click.testing import CliRunner

from orchrm_dagster.ingest import ingest_files
from orchrm_dagster.storage import BatchFile, NewBatch, Warehouse, register_batches
from tests.conftest import drop

from .test_importers import FIXTURES, LANGFUSE_RUN, LANGSMITH_RUN, OTEL_RUN


def _table(root, name, columns):
    warehouse = Warehouse(root)
    warehouse.refresh_views((name,))
    return warehouse.query(f"select {columns} from {name} order by all").to_pylist()


def test_trace_files_dropped_with_a_run_batch_are_one_batch_of_runs_and_quarantined_traces(tmp_path, storage_root,
                                                                                            good_records):
    names = [drop(storage_root, shutil.copy(FIXTURES / name, tmp_path / name))
             for name in ("team.otlp.jsonl", "team.langfuse.json", "team.langsmith.jsonl")]
    runs_file = tmp_path / "runs.jsonl"
    runs_file.write_text("".join(json.dumps(r) + "\n" for r in good_records[:3]))
    names.append(drop(storage_root, str(runs_file)))
    assert {f.name for f in storage_root.landed_files()} == set(names)  # what the loop lists and cuts into batches
    register_batches(storage_root, [NewBatch("day-1", tuple(names), True)])
    files = [BatchFile(n, storage_root.landing_path(n), storage_root.landed_file(n).fingerprint) for n in names]
    report = ingest_files(storage_root, "day-1", files)
    assert (report.runs_written, report.quarantined, report.failed_files) == (6, 3, {})
    runs = _table(storage_root, "runs", "source_file, line_number, run_id, policy_name, n_subagent_calls")
    assert [(r["source_file"], r["line_number"], r["run_id"]) for r in runs] == [
        ("runs.jsonl", 1, good_records[0]["run_id"]), ("runs.jsonl", 2, good_records[1]["run_id"]),
        ("runs.jsonl", 3, good_records[2]["run_id"]), ("team.langfuse.json", 1, LANGFUSE_RUN["run_id"]),
        ("team.langsmith.jsonl", 1, LANGSMITH_RUN["run_id"]), ("team.otlp.jsonl", 1, OTEL_RUN["run_id"])]
    calls = _table(storage_root, "subagent_calls", "run_id, call_index, agent_name, prompt_tokens")
    assert [(c["agent_name"], c["prompt_tokens"]) for c in calls if c["run_id"] == OTEL_RUN["run_id"]] == [
        ("CoTAgent", 400), ("calculator", None)]
    quarantine = _table(storage_root, "quarantine", "source_file, line_number, run_id, kind, field, reason")
    assert [(q["source_file"], q["line_number"], q["run_id"], q["kind"], q["field"]) for q in quarantine] == [
        ("team.langfuse.json", 2, "lf-trace-2", "unplaceable_trace", "plan"),
        ("team.langsmith.jsonl", 2, "9c4f1d3e-0000-4000-8000-000000000010", "unplaceable_trace", "spans"),
        ("team.otlp.jsonl", 2, "0af7651916cd43dd8448eb211c80319c", "unplaceable_trace", "problem_id")]
    assert quarantine[2]["reason"].startswith("team.otlp.jsonl:2: trace 0af7651916cd43dd8448eb211c80319c (line 2): "
                                              "no problem")


def test_import_traces_lands_converts_and_ingests_with_the_mappings_flags(tmp_path):
    from orchrm_dagster.app.cli import main

    # the benchmark under the team's own attribute name: only the flag places the first trace
    renamed = tmp_path / "spans.jsonl"
    renamed.write_bytes((FIXTURES / "team.otlp.jsonl").read_bytes().replace(b'"orchrm.benchmark"', b'"team.bench"'))
    result = CliRunner().invoke(main, ["import-traces", str(renamed), "--format", "otel",
                                       "--benchmark-attribute", "team.bench"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "1 runs, 1 quarantined" in result.output and "no problem" in " ".join(result.output.split())
    listed = CliRunner().invoke(main, ["query", "--format", "json", "select source_file, run_id, benchmark from runs"])
    assert json.loads(listed.output) == [{"source_file": "spans.otlp.jsonl", "run_id": OTEL_RUN["run_id"],
                                          "benchmark": "gsm8k"}]
    unknown = CliRunner().invoke(main, ["import-traces", str(renamed)])
    assert unknown.exit_code == 2 and "say its format with --format" in unknown.output
