import json
import os
import re

import dagster as dg
from click.testing import CliRunner

from orchrm_dagster.app.cli import main
from orchrm_dagster.synthetic import EXAMPLE_BATCH


def invoke(*args):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result


def query_json(sql):
    result = invoke("query", "--format", "json", sql)
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_ingest_status_query_and_reingest_through_the_cli(isolated_env):
    first = invoke("ingest", str(EXAMPLE_BATCH))
    assert first.exit_code == 0, first.output
    assert "example_runs.jsonl" in first.output
    # not a terminal: one plain line per step, with its elapsed time and what it produced
    assert re.search(r"^\d\d:\d\d:\d\d  started   ingesting example_runs\.jsonl$", first.output, re.M)
    assert re.search(r"^\d\d:\d\d:\d\d  finished  ingesting example_runs\.jsonl \(\d+(\.\d)? s\): 48 runs, "
                     r"6 quarantined, 48 labeled, 30 correct$", first.output, re.M), first.output

    totals = query_json("select (select count(*) from runs) runs, (select count(*) from quarantine) quarantined, "
                        "(select count(*) from labels) labeled")
    assert totals == [{"runs": 48, "quarantined": 6, "labeled": 48}]
    reasons = query_json("select line_number, field from quarantine order by line_number")
    assert [r["line_number"] for r in reasons] == [11, 21, 22, 31, 32, 33]
    assert {r["field"] for r in reasons} >= {"plan", "policy.kind", "policy.step", "run_id"}

    again = invoke("ingest", str(EXAMPLE_BATCH))
    assert again.exit_code == 0
    assert query_json("select (select count(*) from runs) runs, (select count(*) from quarantine) quarantined, "
                      "(select count(*) from labels) labeled") == totals

    status = invoke("status")
    assert status.exit_code == 0 and "example_runs.jsonl" in status.output and "total" in status.output

    # the runs the CLI made are in the shared instance's history, as the UI shows them
    with dg.DagsterInstance.get() as instance:
        runs = instance.get_runs()
        assert len(runs) == 2 and all(r.job_name == "ingest_run_batch" for r in runs)


def test_materialize_by_key_and_csv_query(isolated_env):
    result = invoke("materialize", "problems")
    assert result.exit_code == 0, result.output
    csv_out = invoke("query", "--format", "csv", "select benchmark, count(*) n from problems group by 1 order by 1")
    assert csv_out.output == "benchmark,n\naime24,30\naime25,30\ngsm8k,1319\nhotpotqa,500\nmath500,500\n"  # LF only


def test_model_load_bars_and_reports_are_silent_unless_verbose(isolated_env, monkeypatch):
    from orchrm_dagster.app.cli import QUIET_MODEL_LOADS

    for name in QUIET_MODEL_LOADS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRANSFORMERS_VERBOSITY", "info")  # a user's own choice is kept
    CliRunner().invoke(main, ["query", "select 1"])
    assert os.environ["TQDM_DISABLE"] == "1" and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    assert os.environ["TRANSFORMERS_VERBOSITY"] == "info"
    for name in QUIET_MODEL_LOADS:
        monkeypatch.delenv(name, raising=False)
    CliRunner().invoke(main, ["--verbose", "query", "select 1"])
    assert not any(name in os.environ for name in QUIET_MODEL_LOADS)


def test_query_is_read_only_and_errors_are_clear(isolated_env):
    missing = CliRunner().invoke(main, ["query", "select 1"])
    assert missing.exit_code != 0 and "no warehouse" in missing.output
    invoke("materialize", "problems")
    write = CliRunner().invoke(main, ["query", "create table t as select 1"])
    assert write.exit_code != 0 and "read-only" in write.output.lower()


def test_a_failed_step_shows_its_cause_not_dagsters_wrapper(isolated_env):
    invoke("materialize", "problems")
    result = invoke("materialize", "reward_model")
    assert result.exit_code == 1
    assert "no training pairs" in result.output and "Error occurred while executing op" not in result.output
    assert re.search(r"FAILED    materializing key:\"reward_model\" \(\d+(\.\d)? s\): run \S+: .*no training pairs",
                     result.output), result.output


def test_a_batch_whose_ingest_failed_shows_in_status_with_its_cause_until_reingested(isolated_env, monkeypatch):
    from orchrm_dagster.storage import StorageRoot, land

    root = StorageRoot(str(isolated_env / "storage"))
    landed = land(root, EXAMPLE_BATCH)
    import orchrm_dagster.ingest as ingest

    def broken(*args, **kwargs):
        raise OSError("the disk went away")

    import assets.ingestion

    monkeypatch.setattr(assets.ingestion, "ingest_files", broken)
    failed = invoke("reingest", landed.name)
    assert failed.exit_code == 1 and "the disk went away" in failed.output
    status = invoke("status")
    assert "failed (1 run)" in status.output and "OSError: the disk went away" in status.output
    monkeypatch.setattr(assets.ingestion, "ingest_files", ingest.ingest_files)
    assert invoke("reingest", landed.batch_id).exit_code == 0
    status = invoke("status")
    assert "ingested" in status.output and "failed" not in status.output
    unknown = invoke("reingest", "never-landed.jsonl")
    assert unknown.exit_code == 2 and "never-landed.jsonl" in unknown.output


def test_evaluate_help_lists_every_registered_method_with_its_description():
    from orchrm_dagster.evaluation import registered_methods

    result = invoke("evaluate", "--help")
    assert result.exit_code == 0, result.output
    for method in registered_methods().values():
        assert f"{method.name}: {method.description}" in result.output


def test_evaluate_refuses_an_unknown_method_with_a_usage_error():
    result = invoke("evaluate", "--methods", "single,best_guess")
    assert result.exit_code == 2
    assert "unknown evaluation method 'best_guess'" in result.output and "orchrm_bon" in result.output


def test_the_main_job_refuses_an_unknown_policy_before_any_work(isolated_env):
    result = invoke("main", "--policy", "smollm2-fewshot", "--policy", "nope")
    assert result.exit_code == 1
    assert "unknown policy nope: the known ones are smollm2-base, smollm2-fewshot (or all)" in result.output
    assert result.output.count("unknown policy nope") == 1  # reported once, as the failed step
    assert "materializing problems" not in result.output and not (isolated_env / "storage" / "tables").exists()


def test_judge_ns_outside_the_evaluated_ns_is_a_usage_error(isolated_env):
    result = CliRunner().invoke(main, ["evaluate", "--n", "1,8", "--judge-n", "4"])
    assert result.exit_code == 2 and "judge.ns [4] must be among ns [1, 8]" in result.output


def test_a_failed_champion_check_prints_its_refusal_whole_and_each_domain_its_own_pairs(isolated_env, monkeypatch):
    from assets.training_process import TrainingProcessResource
    from orchrm_dagster.storage import StorageRoot
    from tests.loop_roots import write_reward_model

    # a math-only batch made v1: 18 of 18 validation pairs right, all math, under min_validation_pairs (20)
    write_reward_model(StorageRoot(str(isolated_env / "storage")), 1, right=18, validation_pairs={"math": 18})
    monkeypatch.setattr(TrainingProcessResource, "run", lambda self, context, job, request, gpus=1:
                        {"outcomes": [], "pid": 0})  # the training ran: v1 is what it left
    result = invoke("materialize", "reward_model")
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if "FAILED" in line]
    assert "blocking asset check failed" in line and "champion_beats_chance failed: " in line
    assert ("math: no champion reward model for the math domain: v1 had 18 validation pairs there (accuracy 1.000, "
            "p = 3.8e-06 against chance), fewer than min_validation_pairs (20): land more runs or lower "
            "min_validation_pairs") in line
    for domain in ("choice", "qa"):  # no pairs of their own: they say so, not math's 18
        assert (f"{domain}: no champion reward model for the {domain} domain: v1 had no validation pairs of its own "
                f"there, only 18 of other domains (accuracy 1.000") in line


def test_library_warnings_stay_out_of_the_step_lines_unless_verbose(isolated_env, monkeypatch, recwarn):
    import warnings

    import orchrm_dagster.app.commands as commands

    materialize = commands.materialize_selection

    def warning_then_materialize(*args, **kwargs):  # as Dagster Pipes warns inside a training step
        warnings.warn("PipesMessageReader.expected_writer_count is currently in preview", dg.PreviewWarning)
        return materialize(*args, **kwargs)

    monkeypatch.setattr(commands, "materialize_selection", warning_then_materialize)
    monkeypatch.delenv("PYTHONWARNINGS", raising=False)
    quiet = invoke("materialize", "problems")
    assert quiet.exit_code == 0, quiet.output
    shown = lambda: [str(w.message) for w in recwarn.list if "expected_writer_count" in str(w.message)]  # noqa: E731
    assert "expected_writer_count" not in quiet.output and not shown()
    assert re.search(r"^\d\d:\d\d:\d\d  finished  materializing key:\"problems\"", quiet.output, re.M)
    assert re.search(r"\n\d+ library warning\(s\) hidden \(orchrm --verbose \.\.\. shows them\)\n$", quiet.output)
    assert os.environ["PYTHONWARNINGS"] == "ignore"  # the step subprocesses' too
    monkeypatch.delenv("PYTHONWARNINGS")
    verbose = invoke("--verbose", "materialize", "problems")
    assert verbose.exit_code == 0 and "hidden" not in verbose.output and "PYTHONWARNINGS" not in os.environ
    assert shown() == ["PipesMessageReader.expected_writer_count is currently in preview"]  # as Python shows it


def test_the_command_ends_its_process_with_its_exit_code_and_all_its_output(tmp_path):
    """`orchrm` ends without the interpreter's teardown (app.cli.run): its code, its output and its exit handlers
    are what they would be."""
    import subprocess
    import sys

    def orchrm(*args: str, code: str = "") -> subprocess.CompletedProcess:
        program = ("import atexit, sys; atexit.register(lambda: print('exit handler ran', flush=True)); " + code +
                   "from orchrm_dagster.app.cli import run; sys.argv = ['orchrm', *sys.argv[1:]]; run()")
        return subprocess.run([sys.executable, "-c", program, *args], capture_output=True, text=True, timeout=120)

    helped = orchrm("--help")
    assert helped.returncode == 0 and "Commands:" in helped.stdout and "exit handler ran" in helped.stdout
    unknown = orchrm("nosuch")
    assert unknown.returncode == 2 and "No such command 'nosuch'" in unknown.stderr
    refused = orchrm("--storage", str(tmp_path / "nothing"), "status")
    assert refused.returncode == 1 and "nothing landed or ingested yet" in refused.stderr
    assert "exit handler ran" in refused.stdout
