"""The processes a training runs in, and how none of them outlives the process that owns it.

A training runs in processes of its own: Dagster Pipes starts one per step, and `accelerate launch` one per device
(`run_data_parallel`). A kill -9 of their owner (the Dagster run worker, `orchrm loop`) tells them nothing, and
torch's launcher starts each worker in a session of its own, out of reach of a signal to the owner's group. So every
one of them watches its owners (`watch_owners`): `OWNERS_ENV` lists each owner's pid and start time, and is inherited
by every descendant; a process that finds an owner gone kills its own descendants and then itself. An orphan would
otherwise keep training, and hold its GPU, beside the retry that replaces it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

OWNERS_ENV = "ORCHRM_OWNER_PIDS"
WATCH_INTERVAL_S = 0.5


class TrainingProcessFailed(RuntimeError):
    """A training process failed: the message is its own last error (or how it died)."""


def owned_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a child started by this process gets: its owners are this process and this one's owners."""
    environ = dict(os.environ if environ is None else environ)
    return {**environ, OWNERS_ENV: owners_of_a_child(environ)}


def owners_of_a_child(environ: dict[str, str] | None = None) -> str:
    """`OWNERS_ENV` of a child of this process: this process and this one's owners."""
    inherited = (os.environ if environ is None else environ).get(OWNERS_ENV, "")
    return ",".join([*filter(None, inherited.split(",")), f"{os.getpid()}:{started_at(os.getpid())!r}"])


def watch_owners(interval_s: float = WATCH_INTERVAL_S) -> threading.Thread | None:
    """Start a daemon thread that kills this process (its descendants first) once any owner named in `OWNERS_ENV`
    is gone; None when there are no owners (a process started by hand)."""
    owners = _owners(os.environ.get(OWNERS_ENV, ""))
    if not owners:
        return None
    thread = threading.Thread(target=_watch, args=(owners, interval_s), name="orchrm-owner-watch", daemon=True)
    thread.start()
    return thread


def _owners(value: str) -> list[tuple[int, float]]:
    owners = []
    for entry in filter(None, value.split(",")):
        pid, _, started = entry.partition(":")
        owners.append((int(pid), float(started)))
    return owners


def started_at(pid: int) -> float:
    """When process `pid` started: on Linux its start in clock ticks since boot (/proc/<pid>/stat), which a step of
    the wall clock (NTP, a migrated VM) leaves alone; elsewhere psutil's wall-clock create time. NoSuchProcess when
    there is none."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return float(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):
            raise psutil.NoSuchProcess(pid) from None
        return psutil.Process(pid).create_time()


def owner_alive(pid: int, started: float) -> bool:
    """Whether the process `pid` that started at `started` still runs (a pid reused by another process does not
    count; a zombie, dead but not yet reaped by its parent, does not either)."""
    try:
        return started_at(pid) == started and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _watch(owners: list[tuple[int, float]], interval_s: float) -> None:
    while all(owner_alive(pid, started) for pid, started in owners):
        time.sleep(interval_s)
    kill_tree(os.getpid())


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`'s descendants, then `pid`."""
    try:
        root = psutil.Process(pid)
        family = root.children(recursive=True) + [root]
    except psutil.NoSuchProcess:
        return
    for process in family:
        try:
            process.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


JOB_FILE = "job.json"
RESULT_FILE = "result.json"


def run_data_parallel(module: str, job_dir: str | Path, job: dict, processes: int, device: str,
                      prepare: Callable[[Path], None] = lambda folder: None) -> dict:
    """The result of `job` run by `processes` data-parallel processes of `module` (whose `main` is
    `data_parallel_process`): the job folder is started over, `prepare` writes what else they read into it, the job
    goes to JOB_FILE, and the first process's result comes back from RESULT_FILE. The folder is removed once they
    succeed; a failure raises `TrainingProcessFailed` (`_launch`)."""
    folder = Path(job_dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    prepare(folder)
    (folder / JOB_FILE).write_text(json.dumps(job))
    _launch(module, folder, processes, device)
    result = json.loads((folder / RESULT_FILE).read_text())
    shutil.rmtree(folder, ignore_errors=True)
    return result


def data_parallel_process(work: Callable[[dict, Path], dict]) -> None:
    """The `main` of one of `run_data_parallel`'s processes (argv[1]: the job folder): it dies with its owners, joins
    the process group and takes its own device before anything loads, runs `work(job, folder)`, and the first
    process writes what `work` returned; a process that fails writes its error for the launcher to report."""
    from accelerate import PartialState

    watch_owners()
    folder = Path(sys.argv[1])
    PartialState()
    try:
        result = work(json.loads((folder / JOB_FILE).read_text()), folder)
        if process_rank() == 0:
            (folder / RESULT_FILE).write_text(json.dumps(result))
        _leave_together()
    except BaseException as error:
        write_error(str(folder), process_rank(), error)
        raise
    finally:
        import torch.distributed as dist

        if dist.is_initialized():  # gloo aborts the process at exit otherwise
            dist.destroy_process_group()


def _leave_together() -> None:
    """Every process waits for the others before the group is torn down: a process whose peer had already left
    aborted in gloo's teardown now and then ("terminate called without an active exception", SIGABRT) after a
    training that succeeded."""
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def process_rank() -> int:
    """This process's index among a training's data-parallel processes (0: the first, or the only one)."""
    return int(os.environ.get("RANK", "0"))


def by_first_process(action: Callable[[], object]) -> None:
    """`action`, done once, by the first of several data-parallel processes, before any of them goes on (what it
    decides on disk, such as starting a folder over, is then seen by all); in a process of its own, just done."""
    if "WORLD_SIZE" not in os.environ:
        action()
        return
    import torch.distributed as dist

    # by RANK, not accelerate's state: a trainer's arguments reset that state while they are built
    if process_rank() == 0:
        action()
    dist.barrier()


def _launch(module: str, job_dir: Path, processes: int, device: str) -> None:
    """Run `python -m module job_dir` as `processes` data-parallel processes through `accelerate launch`
    (torch.distributed: NCCL on GPUs, gloo on the CPU), each owned by this process. Their output passes through; a
    failure raises `TrainingProcessFailed` with the failing process's own last error (`write_error`), or how it
    died."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_machines", "1",
               "--num_processes", str(processes), "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(free_port()), "-m", module, str(job_dir)]
    environ = owned_env()
    if device == "cpu":
        environ["CUDA_VISIBLE_DEVICES"] = ""  # gloo on the CPU even where a GPU is present
    tail: deque[str] = deque(maxlen=60)
    with subprocess.Popen(command, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as launcher:
        for line in launcher.stdout:
            sys.stderr.write(line)
            tail.append(line.rstrip("\n"))
    if launcher.returncode != 0:
        raise TrainingProcessFailed(failure_cause(job_dir, tail, processes, launcher.returncode))


ERROR_FILE = "error-rank{rank}.txt"


def write_error(job_dir: str, rank: int, error: BaseException) -> None:
    """What a data-parallel process writes when it fails: its error, read back by `_launch`."""
    Path(job_dir, ERROR_FILE.format(rank=rank)).write_text(f"{type(error).__name__}: {error}")


def failure_cause(job_dir: str, tail: Sequence[str], processes: int, returncode: int) -> str:
    """Why a data-parallel training failed: each failed process's own error; for one that died without a word (a
    kill -9, the OOM killer), its signal as the launcher reported it."""
    # the first to fail first: one killed by a signal leaves no error file, and the others then fail on losing it
    report = "\n".join(tail)
    deaths = [f"process {rank} of {processes} {how_it_ended(code)}" for rank, code in _signal_deaths(report)]
    errors = [f"process {_rank(path)} of {processes}: {path.read_text().strip()}"
              for path in sorted(Path(job_dir).glob(ERROR_FILE.format(rank="*")), key=lambda p: p.stat().st_mtime)]
    if deaths or errors:
        return "; then ".join(["; ".join(deaths), *errors] if deaths else errors)
    exits = _launcher_exits(report)
    if exits:
        return "; ".join(f"process {rank} of {processes} {how_it_ended(code)}" for rank, code in exits)
    last = next((line for line in reversed(tail) if line.strip()), "no output")
    return f"the data-parallel launcher exited with code {returncode}; its last line: {last}"


def _rank(path: Path) -> str:
    return re.search(r"rank(\d+)", path.name).group(1)


def _launcher_exits(report: str, root_cause_only: bool = True) -> list[tuple[str, int]]:
    """(rank, exit code) of each failure torch's launcher reports (`rank : 1 (local_rank: 1)` then `exitcode : -9
    (pid: 123)`): the one it names the root cause, or every one."""
    if root_cause_only and "Root Cause" in report:
        report = report[report.rfind("Root Cause"):]  # not the others it then stopped
    return [(rank, int(code)) for rank, code in
            re.findall(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", report)]


def _signal_deaths(report: str) -> list[tuple[str, int]]:
    """The processes killed by a signal: the launcher's root cause if it was, then any other killed by a signal but
    SIGTERM (what the launcher sends the rest once one has failed). A process that fails on losing a killed one can
    be seen first when both end within one of the launcher's polls, and named the root cause."""
    root = [(rank, code) for rank, code in _launcher_exits(report) if code < 0]
    others = [(rank, code) for rank, code in _launcher_exits(report, root_cause_only=False)
              if code < 0 and code != -signal.SIGTERM and (rank, code) not in root]
    return root + others


def how_it_ended(returncode: int) -> str:
    """A process's exit status in words (a negative one is the signal that killed it, as subprocess reports it)."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = "unknown signal"
    why = " (a kill -9, or the kernel's OOM killer)" if number == signal.SIGKILL else ""
    return f"was killed by signal {number} ({name}){why}"
