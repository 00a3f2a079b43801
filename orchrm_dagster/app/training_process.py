"""A step's training in a process of its own: `python -m orchrm_dagster.app.training_process`, started by the step
through Dagster Pipes (a subprocess here, a pod of its own on Kubernetes). It reads which training and its request
from the Pipes extras (`job`, `request`), runs it (`training_jobs`), and reports back through Pipes: its log lines as
they come, its result (and its pid) as a custom message. Each log line, and the error that ends it, also goes to the `log_file`
extra when the step gave one, so that a training killed without a word (OOM, kill -9) still leaves its last line.
It dies with its owners (`processes.watch_owners`): a kill -9 of the step's process takes it, and every process it
started, along."""

from __future__ import annotations

import logging
import os
import threading

FORWARDED_LOGGERS = ("orchrm_dagster",)


class _Forward(logging.Handler):
    """Log records to the Pipes log, and to the log file."""

    def __init__(self, say):
        super().__init__(logging.INFO)
        self.say = say

    def emit(self, record: logging.LogRecord) -> None:
        self.say(self.format(record))


def main() -> None:
    from dagster_pipes import open_dagster_pipes

    from orchrm_dagster.processes import watch_owners
    from orchrm_dagster.training_jobs import run_training_job

    watch_owners()
    with open_dagster_pipes() as pipes:
        log_file = pipes.extras.get("log_file")
        said = threading.Lock()  # the round's progress speaks from a thread of its own

        def say(line: str) -> None:
            with said:
                pipes.log.info(line)
                if log_file:
                    with open(log_file, "a") as out:
                        out.write(line.rstrip("\n") + "\n")

        handler = _Forward(say)
        for name in FORWARDED_LOGGERS:
            logging.getLogger(name).addHandler(handler)
            logging.getLogger(name).setLevel(logging.INFO)
        try:
            result = run_training_job(pipes.get_extra("job"), pipes.get_extra("request"), say)
        except BaseException as error:
            say(f"training failed: {type(error).__name__}: {error}")
            raise
        pipes.report_custom_message({**result, "pid": os.getpid()})


if __name__ == "__main__":
    main()
