"""`orchrm loop`: the steps the engine decides, run in-process on the shared instance as the run requests the
sensors make (assets/loop.py builds them), until the loop stops."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import dagster as dg

from assets.loop import loop_state, prepare_steps, step_run
from assets.runs import process_tags, quiet
from orchrm_dagster.app.instance import cli_instance
from orchrm_dagster.loop import Decision, LoopSettings, Step, decide, describe


class LoopFailed(RuntimeError):
    """The loop cannot go on: a step failed too often, or it waits for something no step of its own can bring."""


def drive(defs: dg.Definitions, settings: LoopSettings, on_step: Callable[[Step], None] = lambda step: None,
          on_decision: Callable[[Decision], None] = lambda decision: None, poll_s: float = 5.0,
          on_log: Callable[[str], None] = lambda line: None) -> Decision:
    """Asks the engine what happens next and runs the steps it returns, in-process on the shared instance, with
    the run requests the sensors would make, until the loop stops (its rounds or budget are spent, and the learning
    lane has nothing left to do: the last rollouts are ingested, paired, trained on and scored). The rounds lane's
    steps come first in each decision, so a round never waits behind the learning lane's. Steps another process
    runs (the daemon, say) are waited for. `on_log` hears each step's run log as it is written (a round's progress,
    from its training process)."""
    instance = cli_instance()
    root = defs.resources["storage"].storage_root()
    done: set[str] = set()
    while True:
        decision = decide(loop_state(instance, root, rounds_on=True), settings)
        on_decision(decision)
        if decision.stopped and not decision.steps:
            return decision
        if not decision.steps and decision.waiting:
            time.sleep(poll_s)
            continue
        if not decision.steps:
            raise LoopFailed(f"the loop cannot go on: {describe(decision)}")
        for step in prepare_steps(root, decision.steps):
            if step.key in done:  # succeeded, yet asked for again: the state did not move, and would not
                raise LoopFailed(f"{step.key} succeeded but the loop asks for it again: {step.why}")
            on_step(step)
            if execute_step(defs, instance, step, on_log).success:
                done.add(step.key)


def execute_step(defs: dg.Definitions, instance: dg.DagsterInstance, step: Step,
                 on_log: Callable[[str], None] | None = None, run_config: dg.RunConfig | None = None):
    """One step as an in-process run of its job (its failure is recorded in the instance, where the next decision
    counts it); `on_log` hears its run log's lines as they are written; `run_config`, when given, replaces the
    step's own (a command's flags: `orchrm import-traces`)."""
    run = step_run(step)
    for name, keys in run.partitions:
        instance.add_dynamic_partitions(name, list(keys))
    run_id = str(uuid.uuid4())
    with relayed_log(instance, run_id, on_log):
        return defs.resolve_job_def(run.job_name).execute_in_process(
            partition_key=run.partition_key, instance=instance, raise_on_error=False,
            run_config=quiet(run.run_config if run_config is None else run_config),
            tags={**run.tags, **process_tags()}, run_id=run_id)


@contextlib.contextmanager
def relayed_log(instance: dg.DagsterInstance, run_id: str, on_log: Callable[[str], None] | None,
                poll_s: float = 2.0) -> Iterator[None]:
    """While the block runs, the run's log messages (info and above, not Dagster's own events) go to `on_log`, read
    from the instance's event log every `poll_s` seconds: the UI's run log, as the run writes it."""
    if on_log is None:
        yield
        return
    stop = threading.Event()

    def relay() -> None:
        cursor = None
        while True:
            stopping = stop.wait(poll_s)
            try:
                found = instance.get_records_for_run(run_id, cursor=cursor)
            except Exception:  # noqa: BLE001 (the run not written yet; the storage busy): asked again next time
                found = None
            if found is not None:
                cursor = found.cursor
                for record in found.records:
                    entry = record.event_log_entry
                    if entry.dagster_event is None and entry.user_message and entry.level >= logging.INFO:
                        with contextlib.suppress(Exception):  # a line that cannot be shown stops no later one
                            on_log(entry.user_message)
            if stopping:
                return

    thread = threading.Thread(target=relay, name="run-log-relay", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
