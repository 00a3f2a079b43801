"""The unattended loop left running (SIMULATED environment, tiny random models, small rounds): `dagster-daemon run` on
the daemon test's code location (tests/daemon_location.py, sensors every 5 s) with the GRPO rounds switched on and
rounds that keep coming, while a generator drops one small file of runs into the landing zone every few seconds, as a
fleet's writers do (a hidden name, then a rename: the loop cuts them into batches, one every
--batch-interval-s). Every --sample-s it samples the resident memory and open file descriptors of the daemon, its
code server and each run worker (by role, from the daemon's process tree), and the sizes of the DuckDB file, the
storage root and DAGSTER_HOME; every --poll-s it reads which batches the champion reward model has scored; at the
end it reads the rounds lane's runs (rounds and rollouts) and the rounds' rows (the barrier each recorded). It prints
p50/p95 of each batch's latency (its first file landed -> the champion's scores exist for every run of it), the
growth of each figure after the warm-up (minute --warmup-min to the end), the failed runs with their causes, a verdict
against each target (memory and fds under 10% growth after warm-up, p95 within 10 minutes, no failed run), and writes
samples.csv, batches.csv and soak.png in --out.

    .venv/bin/python bench/soak.py --minutes 65 --out /tmp/exp/soak
    .venv/bin/python bench/soak.py --minutes 6 --out /tmp/exp/soak-smoke      # a smoke run

Growth of a figure: the least-squares line through its samples from the warm-up on, its rise over that span as a
share of its value at the warm-up's end (robust to one noisy sample); the plain last/first ratio is printed beside it.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROLES = ("daemon", "code_server", "run_workers", "trainers", "other")
SEED0 = 100_000  # file i's runs carry seed SEED0 + i in their run ids (run-<seed>-<first_problem>-<index>)


def role_of(cmdline: list[str]) -> str:
    """The daemon's process tree: its code servers (`dagster api grpc`, a fresh one each workspace reload, an old
    one living on while its runs do), their run workers (the DefaultRunLauncher starts each run in a
    multiprocessing child of the code server), the reward model's training processes under a run worker, and
    the rest (multiprocessing's resource tracker, the compute logs' `tail -F` and their orphan watchers)."""
    text = " ".join(cmdline)
    if "dagster-daemon" in text:
        return "daemon"
    if "code-server" in text or "api grpc" in text:
        return "code_server"
    if "multiprocessing.spawn" in text or "execute_run" in text or "execute_step" in text:
        return "run_workers"
    if "training_process" in text:
        return "trainers"
    return "other"


def dir_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


def sample_processes(pid: int) -> dict:
    import psutil

    figures = {f"{role}_{what}": 0 for role in ROLES for what in ("rss_mb", "fds", "n")}
    figures["run_workers_max_rss_mb"] = 0.0
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return figures
    for process in processes:
        try:
            with process.oneshot():
                role = "daemon" if process.pid == pid else role_of(process.cmdline())
                rss = process.memory_info().rss / 2**20
                fds = process.num_fds()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        figures[f"{role}_rss_mb"] += rss
        figures[f"{role}_fds"] += fds
        figures[f"{role}_n"] += 1
        if role == "run_workers":
            figures["run_workers_max_rss_mb"] = max(figures["run_workers_max_rss_mb"], rss)
    figures["all_rss_mb"] = sum(figures[f"{r}_rss_mb"] for r in ROLES)
    figures["all_fds"] = sum(figures[f"{r}_fds"] for r in ROLES)
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}


class Soak:
    def __init__(self, args, work: Path):
        from tests.tiny_models import make_tiny_backbone, make_tiny_policy

        self.args, self.work = args, work
        self.storage, self.home = work / "storage", work / "dagster_home"
        self.workspace = work / "workspace.yaml"
        tree = self.tree = args.tree.resolve()  # the source the daemon, its code servers and run workers import
        self.workspace.write_text(f"load_from:\n  - python_file:\n      relative_path: "
                                  f"{tree / 'tests/daemon_location.py'}\n      working_directory: {tree}\n"
                                  "      location_name: orchrm\n")
        tiny = (make_tiny_policy(work / "policy"), make_tiny_backbone(work / "rm"))
        self.env = {**os.environ, "ORCHRM_STORAGE": str(self.storage), "DAGSTER_HOME": str(self.home),
                    "ORCHRM_TEST_TINY_POLICY": tiny[0], "ORCHRM_TEST_TINY_BACKBONE": tiny[1],
                    "ORCHRM_TEST_ATTEMPTS": "2", "ORCHRM_TEST_ENVIRONMENT": "simulated",
                    "ORCHRM_TEST_ROUNDS": str(args.rounds), "ORCHRM_TEST_BATCH_INTERVAL_S": str(args.batch_interval_s),
                    "PYTHONPATH": str(tree),
                    **({"ORCHRM_TEST_ACCURACY_MARGIN": str(args.accuracy_margin)}
                       if args.accuracy_margin is not None else {})}
        os.environ["ORCHRM_STORAGE"], os.environ["DAGSTER_HOME"] = str(self.storage), str(self.home)
        from orchrm_dagster.app.instance import cli_instance

        self.instance = cli_instance()  # its storages created under a lock before the daemon and code server race
        self.landed: dict[int, float] = {}  # file index -> when it appeared in the landing zone
        self.stop_landing = threading.Event()
        self.log = open(work / "daemon.log", "w")
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen([str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w",
                                         str(self.workspace)], env=self.env, cwd=self.tree, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def dagster(self, *args: str) -> None:
        subprocess.run([str(Path(sys.executable).with_name("dagster")), *args, "-w", str(self.workspace)],
                       env=self.env, cwd=self.tree, check=True, capture_output=True, timeout=300)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self.log.close()

    def land_forever(self, until: float) -> None:
        """One file of --runs-per-file runs every --every-s, as a fleet's writer drops it: a hidden name, then a
        rename (the loop cuts such files into batches; `storage.land` would make each a batch of its own)."""
        from orchrm_dagster.synthetic import generate_runs, write_jsonl

        landing = self.storage / "landing"
        landing.mkdir(parents=True, exist_ok=True)
        drop = self.work / "drop"
        drop.mkdir(exist_ok=True)
        per_file = self.args.runs_per_file
        problems = -(-per_file // 8)  # 8 samples a problem
        index, next_at = 0, time.time()
        while not self.stop_landing.is_set() and time.time() < until:
            # problems 80-119 hold the stable split's validation problems (85, 91, 111, 112, 115)
            first = 80 + (index * problems) % 40
            path = drop / f"soak-{index:05d}.jsonl"
            write_jsonl(generate_runs(per_file, seed=SEED0 + index, benchmarks=("gsm8k_test",), plans_decide=True,
                                      first_problem=first), path)
            hidden = landing / f".{path.name}.part"
            shutil.copyfile(path, hidden)
            os.rename(hidden, landing / path.name)
            self.landed[index] = time.time()
            path.unlink()
            index += 1
            next_at += self.args.every_s
            self.stop_landing.wait(max(0.0, next_at - time.time()))

    def query(self, statement: str, tables: tuple[str, ...]):
        """A statement over the tables' Parquet files in a scratch in-memory DuckDB: the bench neither rebuilds nor
        holds the warehouse file whose size it measures."""
        from orchrm_dagster.storage import StorageSettings

        try:
            with StorageSettings(root=str(self.storage)).warehouse().scratch_connection(tables) as con:
                return con.sql(statement).to_arrow_table().to_pylist()
        except Exception:  # noqa: BLE001  (a table not written yet)
            return None

    def scored_batches(self) -> list[dict] | None:
        """Per batch of landed files: its files (by seed), its runs and how many the champion has scored."""
        return self.query(
            "with champion as (select distinct run_id from rm_scores where rm_version in "
            "(select version from rm_checkpoints where is_champion)) "
            "select r.batch_id, list(distinct cast(split_part(r.run_id, '-', 2) as bigint)) seeds, count(*) n, "
            "count(c.run_id) scored from runs r left join champion c using (run_id) "
            f"where r.run_id like 'run-1_____-%' group by r.batch_id", ("runs", "rm_scores", "rm_checkpoints"))


def fit_growth(times: list[float], values: list[float]) -> float | None:
    """The least-squares line's rise over the span, as a share of its value at the span's start."""
    if len(values) < 2 or len(set(times)) < 2:
        return None
    mean_t, mean_v = statistics.fmean(times), statistics.fmean(values)
    slope = sum((t - mean_t) * (v - mean_v) for t, v in zip(times, values)) / sum((t - mean_t) ** 2 for t in times)
    start = mean_v + slope * (times[0] - mean_t)
    if start <= 0:
        return None
    return slope * (times[-1] - times[0]) / start


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def failed_runs(instance) -> list[tuple[str, str, str]]:
    import dagster as dg

    from assets.loop import run_failure_cause

    out = []
    for run in instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE])):
        try:
            cause = run_failure_cause(instance, run.run_id)
        except Exception as error:  # noqa: BLE001
            cause = f"(cause unreadable: {error})"
        out.append((run.run_id, f"{run.job_name} {run.tags.get('orchrm/step', '')}".strip(), str(cause)[:300]))
    return out


def round_lane_runs(instance, t0: float) -> list[dict]:
    """The rounds lane's runs (rollouts and rounds), oldest first: kind, step key, status, start and end (minutes
    since t0; None while it runs)."""
    import dagster as dg

    found = []
    for record in instance.get_run_records(dg.RunsFilter(job_name="grpo_round_job")) + instance.get_run_records(
            dg.RunsFilter(job_name="orchestrate")):
        step = record.dagster_run.tags.get("orchrm/step", "")
        start, end = record.start_time, record.end_time
        found.append({"kind": step.split(":")[0] or record.dagster_run.job_name, "step": step,
                      "status": record.dagster_run.status.value,
                      "start_min": round((start - t0) / 60, 2) if start else None,
                      "end_min": round((end - t0) / 60, 2) if end else None})
    return sorted(found, key=lambda r: (r["start_min"] is None, r["start_min"] or 0))


def round_gaps(lane: list[dict]) -> list[dict]:
    """Each round after the first: when it fell due (the previous round's lane work ended: the round, and its
    rollouts when it was promoted) and when its run started. The gap is the barrier (its rollouts ingested, scored,
    paired, trained on) plus the sensors' ticks and the launch."""
    gaps = []
    rounds = [r for r in lane if r["kind"] == "round" and r["status"] == "SUCCESS"]
    for earlier, later in zip(rounds, rounds[1:]):
        before = [r["end_min"] for r in lane if r["end_min"] is not None and r["start_min"] is not None
                  and earlier["start_min"] <= r["start_min"] < later["start_min"]]
        due = max(before) if before else earlier["end_min"]
        gaps.append({"round": later["step"], "due_min": due, "start_min": later["start_min"],
                     "gap_s": round((later["start_min"] - due) * 60, 1)})
    return gaps


def run_counts(instance) -> dict[str, int]:
    import dagster as dg

    counts = {}
    for status in (dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.STARTED,
                   dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.CANCELED):
        counts[status.value.lower()] = instance.get_runs_count(dg.RunsFilter(statuses=[status]))
    return counts


def plot(samples: list[dict], batches: list[dict], path: Path, warmup_min: float, lane: list[dict] = ()) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [s["minute"] for s in samples]
    fig, axes = plt.subplots(4, 1, figsize=(12, 13), sharex=True)
    for role in ROLES:
        axes[0].plot(minutes, [s.get(f"{role}_rss_mb", 0) for s in samples], label=f"{role} (sum)")
    axes[0].plot(minutes, [s["run_workers_max_rss_mb"] for s in samples], ":", label="largest run worker")
    axes[0].plot(minutes, [s["code_server_rss_per_server_mb"] for s in samples], "--", label="code server (each)")
    axes[0].set_ylabel("resident memory (MiB)")
    for role in ROLES:
        axes[1].plot(minutes, [s.get(f"{role}_fds", 0) for s in samples], label=role)
    axes[1].set_ylabel("open file descriptors")
    for key, label in (("warehouse_mb", "warehouse.duckdb"), ("storage_mb", "storage root"),
                       ("dagster_home_mb", "DAGSTER_HOME")):
        axes[2].plot(minutes, [s[key] for s in samples], label=label)
    axes[2].set_ylabel("size (MiB)")
    axes[2].set_yscale("log")
    done = [b for b in batches if b["latency_s"] is not None]
    axes[3].plot([b["landed_min"] for b in done], [b["latency_s"] / 60 for b in done], "o-", label="scored")
    waiting = [b for b in batches if b["latency_s"] is None]
    if waiting:
        axes[3].plot([b["landed_min"] for b in waiting], [b["waited_s"] / 60 for b in waiting], "x", color="red",
                     label="not scored by the end (waited)")
    axes[3].axhline(10, color="grey", ls="--", lw=0.8, label="target p95")
    axes[3].set_ylabel("landing -> champion scores (min)")
    axes[3].set_xlabel("minutes since the daemon started (batches: by their first file's landing)")
    for run in lane:  # the rounds on the timeline: a band per round run, a thinner one per rollout
        if run["start_min"] is None:
            continue
        end = run["end_min"] if run["end_min"] is not None else max(minutes or [run["start_min"]])
        color = {"round": "tab:green", "rollout": "tab:olive"}.get(run["kind"], "tab:grey")
        failed = run["status"] != "SUCCESS" and run["end_min"] is not None
        for axis in axes:
            axis.axvspan(run["start_min"], end, color="tab:red" if failed else color,
                         alpha=0.18 if run["kind"] == "round" else 0.08, lw=0)
        if run["kind"] == "round":
            axes[3].text(run["start_min"], axes[3].get_ylim()[1] * 0.92, run["step"], fontsize=6, color="tab:green")
    for axis in axes:
        axis.axvline(warmup_min, color="grey", ls=":", lw=0.8)
        axis.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
        axis.grid(alpha=0.3)
    fig.suptitle("orchrm soak: dagster-daemon with the loop and its rounds on (SIMULATED environment, tiny models); "
                 "green bands: rounds, olive: rollouts")
    fig.tight_layout()
    fig.savefig(path, dpi=80, bbox_inches="tight")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=65.0, help="how long files land (and samples are taken)")
    parser.add_argument("--every-s", type=float, default=6.0, help="one file lands every this many seconds")
    parser.add_argument("--runs-per-file", type=int, default=24)
    parser.add_argument("--batch-interval-s", type=float, default=120.0,
                        help="loop.batching.interval_s: one batch of the landed small files per interval")
    parser.add_argument("--rounds", type=int, default=1000, help="the loop's rounds (so they keep coming)")
    parser.add_argument("--accuracy-margin", type=float, default=1.0,
                        help="the rounds' accuracy_margin: tiny random models learn nothing, so at 1.0 every round is "
                             "promoted and rolls out, and the next round waits at the barrier for its rollouts (the "
                             "loop as it runs when rounds help); -1: the daemon location's default")
    parser.add_argument("--sample-s", type=float, default=60.0)
    parser.add_argument("--poll-s", type=float, default=15.0)
    parser.add_argument("--warmup-min", type=float, default=10.0)
    parser.add_argument("--drain-s", type=float, default=300.0,
                        help="after the last file, wait at most this long for its batches' scores")
    parser.add_argument("--out", type=Path, default=Path("/tmp/exp/soak"))
    parser.add_argument("--keep", action="store_true", help="keep the storage root and DAGSTER_HOME in --out/work")
    parser.add_argument("--tree", type=Path, default=REPO,
                        help="the source tree the daemon serves: a copy (`git worktree add`, or `cp -r`) keeps the "
                             "soak off edits made to the checkout while it runs (every run worker, and the code "
                             "server the daemon starts again each minute, import the tree as it is then)")
    parser.add_argument("--report-only", action="store_true",
                        help="the summary and figure again from --out's samples.csv and state.json")
    args = parser.parse_args()
    if args.accuracy_margin is not None and args.accuracy_margin < 0:
        args.accuracy_margin = None
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        state = json.loads((args.out / "state.json").read_text())
        with open(args.out / "samples.csv") as rows:
            samples = [{k: float(v) if v not in ("", None) else 0.0 for k, v in row.items()}
                       for row in csv.DictReader(rows)]
        report(args, state["t0"], samples, {int(k): v for k, v in state["landed"].items()}, state["members"],
               state["done_at"], [tuple(f) for f in state["failures"]], None,
               end=state.get("end") or state["t0"] + samples[-1]["minute"] * 60, lane=state.get("lane", []),
               rounds=state.get("rounds", []))
        return
    work = args.out / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)

    from orchrm_dagster.devices import cpu_flags

    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {os.cpu_count()} CPUs ({cpu_flags()}); load average "
          f"{os.getloadavg()[0]:.1f}; {vars(args)}", flush=True)
    soak = Soak(args, work)
    soak.start()
    t0 = time.time()
    sensor_on = False
    lander = threading.Thread(target=soak.land_forever, args=(t0 + args.minutes * 60,), daemon=True)
    lander.start()
    samples: list[dict] = []
    done_at: dict[str, float] = {}  # batch -> the first poll that saw every run of it scored by the champion
    members: dict[str, list[int]] = {}
    next_sample, next_poll = t0 + 5, t0
    end_landing = t0 + args.minutes * 60
    sample_file = open(args.out / "samples.csv", "w", newline="")
    writer = None
    try:
        while True:
            now = time.time()
            if soak.process.poll() is not None:
                print(f"the daemon exited ({soak.process.returncode}) at minute {(now - t0) / 60:.1f}", flush=True)
                break
            if now >= next_poll:
                next_poll = now + args.poll_s
                rows = soak.scored_batches() or []
                for row in rows:
                    members[row["batch_id"]] = sorted(s - SEED0 for s in row["seeds"] if s >= SEED0)
                    if row["n"] == row["scored"] and row["batch_id"] not in done_at:
                        done_at[row["batch_id"]] = now
                if not sensor_on and done_at:  # a champion exists: the rounds switched on, as from the UI
                    try:
                        soak.dagster("sensor", "start", "grpo_loop_sensor")
                        sensor_on = True
                        print(f"minute {(time.time() - t0) / 60:.1f}: grpo_loop_sensor started", flush=True)
                    except subprocess.SubprocessError as error:
                        print(f"sensor start failed: {error}", flush=True)
            if now >= next_sample:
                next_sample += args.sample_s
                sample = {"minute": round((now - t0) / 60, 2), **sample_processes(soak.process.pid)}
                warehouse = soak.storage / "warehouse.duckdb"
                sample["warehouse_mb"] = round(warehouse.stat().st_size / 2**20, 2) if warehouse.exists() else 0
                sample["storage_mb"] = round(dir_size(soak.storage) / 2**20, 2)
                sample["dagster_home_mb"] = round(dir_size(soak.home) / 2**20, 2)
                sample["files_landed"] = len(soak.landed)
                sample["batches_seen"] = len(members)
                sample["batches_scored"] = len(done_at)
                sample["load_avg"] = round(os.getloadavg()[0], 2)
                sample.update(run_counts(soak.instance))
                rounds = soak.query("select count(*) n from grpo_rounds", ("grpo_rounds",))
                sample["rounds"] = rounds[0]["n"] if rounds else 0
                samples.append(sample)
                if writer is None:
                    writer = csv.DictWriter(sample_file, fieldnames=list(sample), extrasaction="ignore")
                    writer.writeheader()
                writer.writerow(sample)
                sample_file.flush()
                print(" ".join(f"{k}={v}" for k, v in sample.items()), flush=True)
            if now >= end_landing:
                soak.stop_landing.set()
                all_done = soak.landed and all(
                    any(i in files for b, files in members.items() if b in done_at) for i in soak.landed)
                if all_done or now >= end_landing + args.drain_s:
                    break
            time.sleep(max(0.5, min(next_poll, next_sample) - time.time()))
    finally:
        soak.stop_landing.set()
        sample_file.close()
        failures = failed_runs(soak.instance)
        lane = round_lane_runs(soak.instance, t0)
        rows = soak.query("select round, promoted, rm_version, rm_batches, rollout_batches, rollouts_trained_by "
                          "from grpo_rounds order by round", ("grpo_rounds",)) or []
        soak.stop()
    (args.out / "state.json").write_text(json.dumps({"t0": t0, "end": time.time(), "landed": soak.landed,
                                                      "members": members, "done_at": done_at, "failures": failures,
                                                      "lane": lane, "rounds": rows}))
    report(args, t0, samples, soak.landed, members, done_at, failures, end_landing, lane=lane, rounds=rows)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def report(args, t0, samples, landed, members, done_at, failures, end_landing, end: float | None = None,
           lane: list[dict] = (), rounds: list[dict] = ()) -> None:
    end = end or time.time()
    for sample in samples:  # one code server at a time, but a new one each workspace reload (the old lives on
        # while its runs do): per server
        sample["code_server_rss_per_server_mb"] = round(sample["code_server_rss_mb"] / max(sample["code_server_n"],
                                                                                           1), 1)
    batches = []
    for batch, files in members.items():
        times = [landed[i] for i in files if i in landed]
        if not times:
            continue
        first = min(times)
        latency = done_at[batch] - first if batch in done_at else None
        batches.append({"batch_id": batch, "files": len(files), "landed_min": round((first - t0) / 60, 2),
                        "latency_s": round(latency, 1) if latency is not None else None,
                        "waited_s": round(end - first, 1)})
    unbatched = [i for i in landed if not any(i in f for f in members.values())]
    if unbatched:  # files no ingested batch held by the end: one batch of them, unscored, waiting since the first landed
        first = min(landed[i] for i in unbatched)
        batches.append({"batch_id": f"(not ingested: {len(unbatched)} files)", "files": len(unbatched),
                        "landed_min": round((first - t0) / 60, 2), "latency_s": None,
                        "waited_s": round(end - first, 1)})
    batches.sort(key=lambda b: b["landed_min"])
    with open(args.out / "batches.csv", "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["batch_id", "files", "landed_min", "latency_s", "waited_s"])
        writer.writeheader()
        writer.writerows(batches)
    plot(samples, batches, args.out / "soak.png", args.warmup_min, lane)

    print("\n==== soak summary (SIMULATED environment, tiny random models) ====")
    print(f"ran {(end - t0) / 60:.1f} min; {len(landed)} files landed ({args.runs_per_file} runs each, one every "
          f"{args.every_s:g} s); batching interval_s {args.batch_interval_s:g}; {len(batches)} batches, "
          f"{len(done_at)} scored by the champion; {len(unbatched)} files not ingested by the end; load average "
          f"{os.getloadavg()[0]:.1f} at the end")
    latencies = [b["latency_s"] for b in batches if b["latency_s"] is not None]
    # a batch landed before the end of landing that never got scored counts as at least its wait
    censored = [b["waited_s"] for b in batches if b["latency_s"] is None]
    p50, p95 = percentile(latencies + censored, 0.5), percentile(latencies + censored, 0.95)
    late = [b for b in batches if b["landed_min"] >= args.warmup_min]
    late_values = [b["latency_s"] if b["latency_s"] is not None else b["waited_s"] for b in late]
    print(f"latency landing -> champion scores: p50 {p50 and p50 / 60:.2f} min, p95 {p95 and p95 / 60:.2f} min "
          f"(all {len(latencies) + len(censored)} batches, {len(censored)} unscored counted at their wait); after "
          f"warm-up p50 {_min(percentile(late_values, 0.5))}, p95 {_min(percentile(late_values, 0.95))}, max "
          f"{_min(max(late_values) if late_values else None)}")
    after = [s for s in samples if s["minute"] >= args.warmup_min]
    growth = {}
    keys = ["daemon_rss_mb", "code_server_rss_mb", "code_server_rss_per_server_mb", "run_workers_max_rss_mb",
            "all_rss_mb", "code_server_n", "daemon_fds",
            "code_server_fds", "all_fds", "warehouse_mb", "storage_mb", "dagster_home_mb", "queued"]
    print(f"growth from minute {args.warmup_min:g} to the end ({len(after)} samples; fitted line, last/first):")
    for key in keys:
        values = [s[key] for s in after]
        fitted = fit_growth([s["minute"] for s in after], values)
        plain = (values[-1] / values[0] - 1) if len(values) > 1 and values[0] else None
        growth[key] = fitted
        print(f"  {key:24s} {values[0] if values else '-':>9} -> {values[-1] if values else '-':>9}   "
              f"fitted {_pct(fitted)}   last/first {_pct(plain)}")
    hours = (end - t0) / 3600
    finished = [r for r in lane if r["kind"] == "round" and r["status"] == "SUCCESS"]
    gaps = round_gaps(lane)
    print(f"rounds: {len(finished)} finished in {hours * 60:.0f} min ({len(finished) / hours:.1f} an hour), "
          f"{len(rounds)} rows in grpo_rounds ({sum(1 for r in rounds if r['promoted'])} promoted); "
          f"rollouts: {sum(1 for r in lane if r['kind'] == 'rollout' and r['status'] == 'SUCCESS')}")
    for run in lane:
        print(f"  {run['step'] or run['kind']:28s} {run['status']:8s} minute {run['start_min']} -> {run['end_min']}")
    print("due -> start of each round after the first (due: the previous round's lane work ended): "
          + (", ".join(f"{g['round']} {g['gap_s']:.0f} s" for g in gaps) or "none"))
    if gaps:
        print(f"  gap p50 {_min(percentile([g['gap_s'] for g in gaps], 0.5))}, max "
              f"{_min(max(g['gap_s'] for g in gaps))}")
    for row in rounds:  # the barrier, recorded: a retraining read the predecessor's rollouts before the round began
        rollouts, seen = set(row.get("rollout_batches") or []), set(row.get("rm_batches") or [])
        trained_by = row.get("rollouts_trained_by")
        print(f"  round {row['round']}: champion v{row['rm_version']} (trained on {len(seen)} batches); the last "
              f"promoted round's {len(rollouts)} rollout batches: "
              + ("none" if not rollouts else
                 f"in the champion's pairs" if rollouts <= seen else
                 f"trained on by v{trained_by} (not crowned)" if trained_by else "no retraining was due"))
    print(f"failed runs: {len(failures)}")
    for run_id, what, cause in failures:
        print(f"  {run_id} {what}: {cause}")
    memory = [growth[k] for k in ("daemon_rss_mb", "code_server_rss_per_server_mb")]
    fds = [growth[k] for k in ("daemon_fds", "code_server_fds", "all_fds")]
    print("verdict:")
    print(f"  memory flat (daemon, each code server: < 10% fitted growth): "
          f"{_verdict(all(g is not None and g < 0.10 for g in memory))}")
    print(f"  fds flat (daemon, code server, all < 10%): {_verdict(all(g is not None and g < 0.10 for g in fds))}")
    print(f"  p95 landing -> champion scores within 10 min: {_verdict(bool(latencies) and p95 <= 600)}")
    print(f"  no failed run (none injected): {_verdict(not failures)}")
    print(f"  at least two rounds an hour: {_verdict(len(finished) / hours >= 2)}")
    print(f"samples: {args.out / 'samples.csv'}; batches: {args.out / 'batches.csv'}; figure: {args.out / 'soak.png'}")


def _min(seconds):
    return "-" if seconds is None else f"{seconds / 60:.2f} min"


def _pct(value):
    return "-" if value is None else f"{value * 100:+.1f}%"


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


if __name__ == "__main__":
    main()
