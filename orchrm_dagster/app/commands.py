"""In-process runs of the code location's jobs, for the CLI (and anything else outside the UI)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

import sql
from assets.loop import orchestrate_run_config
from assets.partitions import orchestration_partition_requests
from assets.runs import failure_cause, process_tags, quiet
from orchrm_dagster.app.instance import cli_instance
from orchrm_dagster.app.loop import execute_step
from orchrm_dagster.labels import unlabeled_note, unparsed_note
from orchrm_dagster.orchestration import ExecutionSettings, PlanSamplingSettings
from orchrm_dagster.storage import batch_holding, batch_id_for, land


@dataclass(frozen=True)
class BatchOutcome:
    batch_id: str
    status: str
    run_id: str
    runs: int = 0
    quarantined: int = 0
    labeled: int = 0
    correct: int = 0
    failed_files: tuple[tuple[str, str], ...] = ()  # (file, cause): files of the batch its ingest could not read
    labeled_by_run: int = 0  # of the labeled: by the run's own is_correct (labels.trust_run_labels, no reference)
    unlabeled: int = 0  # runs without a reference answer and without a label of their own
    unparsed_plans: int = 0  # labeled runs whose plan does not parse
    unlabeled_benchmarks: tuple[tuple[str, int], ...] = ()  # (benchmark, runs) of the unlabeled, most first
    failed_runs: int = 0  # runs that failed for a cause outside the plan's answer: a label row, no verdict

    @property
    def ok(self) -> bool:
        return self.status == "SUCCESS" and not self.failed_files

    def summary(self) -> str:
        """`48 runs, 6 quarantined, 48 labeled, 30 correct`, or the failure; `48 labeled (12 by the runs' own
        is_correct)` where trusted runs labeled themselves; then the runs left unlabeled and the labeled runs whose
        plan does not parse, each with what it means, and any file that failed, with why."""
        if self.status != "SUCCESS":
            return self.status
        by_run = f" ({self.labeled_by_run} by the runs' own is_correct)" if self.labeled_by_run else ""
        notes = ([unlabeled_note(self.unlabeled, dict(self.unlabeled_benchmarks))] if self.unlabeled else []) + (
            [unparsed_note(self.unparsed_plans)] if self.unparsed_plans else [])
        notes += [f"{self.failed_runs} failed run(s) without a verdict (a cause outside the plan's answer: the time "
                  f"budget, a sub-agent's or the endpoint's failure; labels.reason says which)"] if self.failed_runs else []
        failed = "".join(f"; {name} FAILED: {cause}" for name, cause in self.failed_files)
        return (f"{self.runs} runs, {self.quarantined} quarantined, {self.labeled} labeled{by_run}, {self.correct} "
                f"correct" + "".join(f"; {note}" for note in notes) + failed)


def ingest_files(defs: dg.Definitions, paths: list[Path], on_start: Callable[[str], None] | None = None,
                 on_done: Callable[[BatchOutcome], None] | None = None) -> list[BatchOutcome]:
    """Land each file and ingest it as a batch of its own (a run_batches partition named after it)."""
    root = defs.resources["storage"].storage_root()
    return ingest_landed(defs, [land(root, path).name for path in paths], on_start, on_done)


def ingest_landed(defs: dg.Definitions, names: list[str], on_start: Callable[[str], None] | None = None,
                  on_done: Callable[[BatchOutcome], None] | None = None,
                  run_config: dg.RunConfig | None = None) -> list[BatchOutcome]:
    """Run the ingest job for files already in the landing zone: each file's batch (one of its own, unless the
    loop cut it into one already) once, as the loop's ingest step of the batch, as the sensor requests it (same job,
    same tags), so the loop counts its outcome like any other. `on_start` gets each batch's name before its run,
    `on_done` its outcome after; `run_config` replaces the ingest step's own (a command's flags)."""
    root = defs.resources["storage"].storage_root()
    return ingest_batches(defs, [batch_holding(root, name) for name in names], on_start, on_done, run_config)


def resolve_batches(root, names: list[str]) -> tuple[list[str], list[str]]:
    """(batch ids, unknown names): each name a batch id, or the name of a file in the landing zone or in a batch
    (its batch)."""
    from orchrm_dagster.storage import read_index

    index = read_index(root)
    landed = [f.name for f in root.landed_files()]
    found, unknown = [], []
    for name in names:
        if name in index.entries:
            found.append(name)
        elif (held := index.batch_of(name)) is not None:
            found.append(held)
        elif name in landed:
            found.append(batch_holding(root, name))
        else:
            own = next((f for f in landed if batch_id_for(f) == name), None)  # a one-file batch's id, by its file
            if own is None:
                unknown.append(name)
            else:
                found.append(batch_holding(root, own))
    return found, unknown


def ingest_batches(defs: dg.Definitions, batch_ids: list[str], on_start: Callable[[str], None] | None = None,
                   on_done: Callable[[BatchOutcome], None] | None = None,
                   run_config: dg.RunConfig | None = None) -> list[BatchOutcome]:
    """Run the loop's ingest step of each batch (each once, in order) in-process."""
    from orchrm_dagster.loop import batch_from_view, ingest_step
    from orchrm_dagster.storage import landing_view

    storage = defs.resources["storage"]
    root = storage.storage_root()
    instance = cli_instance()
    outcomes = []
    for batch_id in dict.fromkeys(batch_ids):
        views = {view.batch_id: view for view in landing_view(root).batches}
        batch = batch_from_view(views[batch_id])
        if on_start:
            on_start(batch.name)
        result = execute_step(defs, instance, ingest_step(batch), run_config=run_config)
        after = {view.batch_id: view for view in landing_view(root).batches}.get(batch_id)
        outcomes.append(_outcome(storage, batch_id, result, after.failed_files if after else ()))
        if on_done:
            on_done(outcomes[-1])
    return outcomes


def orchestrate(defs: dg.Definitions, benchmark: str, policy: str, sampling: PlanSamplingSettings,
                execution: ExecutionSettings):
    """Sample and execute plans for one (benchmark, policy) partition; returns the run's result."""
    instance = register_orchestration_partitions(defs)
    key = dg.MultiPartitionKey({"benchmark": benchmark, "policy": policy})
    run_config = quiet(orchestrate_run_config(sampling, execution))
    return defs.resolve_job_def("orchestrate").execute_in_process(
        partition_key=key, instance=instance, raise_on_error=False, run_config=run_config, tags=process_tags())


def register_orchestration_partitions(defs: dg.Definitions) -> dg.DagsterInstance:
    """Adds the benchmarks and policies the sensor would add, so a benchmark|policy key can run now."""
    instance = cli_instance()
    for request in orchestration_partition_requests(instance, defs.resources["storage"],
                                                    defs.resources["policy_registry"]):
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return instance


def materialization_metadata(result, asset_key: str) -> dict:
    """The metadata values of the run's materialization of `asset_key` ({} when it has none)."""
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        if materialization.asset_key.to_user_string() == asset_key:
            return {k: v.value for k, v in materialization.metadata.items()}
    return {}


def _outcome(storage, batch_id: str, result, failed_files=()) -> BatchOutcome:
    status = "SUCCESS" if result.success else "FAILURE: " + failure_cause(result.all_events)
    warehouse = storage.warehouse()
    # A batch whose run failed before any view was written (the first batch, say) has no warehouse to count from.
    statuses = warehouse.query(sql.load("batch_status")).to_pylist() if warehouse.exists() else []
    rows = [r for r in statuses if r["batch_id"] == batch_id]
    counts = rows[0] if rows else {}
    unlabeled = [(r["benchmark"], r["unlabeled"]) for r in warehouse.query(sql.load("unlabeled_runs")).to_pylist()
                 if r["batch_id"] == batch_id] if counts.get("unlabeled") else []
    return BatchOutcome(batch_id, status, result.run_id, counts.get("runs", 0), counts.get("quarantined", 0),
                        counts.get("labeled", 0), counts.get("correct", 0), tuple(failed_files),
                        counts.get("labeled_by_run", 0), counts.get("unlabeled", 0), counts.get("unparsed_plans", 0),
                        tuple(unlabeled), counts.get("failed_runs", 0))


def materialize_selection(defs: dg.Definitions, selection: str, partition_key: str | None,
                          run_config: dg.RunConfig | dict | None = None):
    """Materialize a Dagster selection string as one in-process run on the shared instance."""
    job = dg.define_asset_job("orchrm_cli_materialize", selection=dg.AssetSelection.from_string(selection))
    merged = dg.Definitions.merge(defs, dg.Definitions(jobs=[job]))
    return merged.resolve_job_def(job.name).execute_in_process(
        instance=cli_instance(), partition_key=partition_key, raise_on_error=False,
        run_config=quiet(run_config), tags=process_tags())
