"""`orchrm serve` under load: requests per second and p50/p99 latency at 1, 8 and 32 concurrent clients.

    .venv/bin/python bench/serve.py [--storage ROOT] [--plans 8] [--seconds 20] [--clients 1,8,32]
                                    [--max-batch-plans 64] [--max-wait-ms 5]

The server is the real command (`orchrm --storage ROOT serve --device cpu`) in its own process, behind a bearer
token made for the run (ORCHRM_SERVE_TOKEN in its environment: as a deployment runs it); the clients are threads of
this process, each with its own httpx connection, sending requests back to back for --seconds per level.
Each request is a gsm8k question and --plans plans from `orchrm_dagster.synthetic.random_plan_text` (2-6 agents),
scored by the champion in ROOT; without --storage a temporary root gets an untrained MiniLM reward head (the packaged
all-MiniLM-L6-v2 as the reward model trains it, same input format: throughput does not depend on the weights).
The clients share the CPU with the server: on a small machine their own cost is part of the figures. The load
average before and after each level is printed, since the machine may be shared.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import httpx  # noqa: E402

from orchrm_dagster.problems import load_shipped  # noqa: E402
from orchrm_dagster.synthetic import random_plan_text  # noqa: E402


def requests_pool(n: int, plans_per_request: int) -> list[dict]:
    questions = [problem["question"] for problem in load_shipped("gsm8k_test")]
    rng = random.Random(0)
    return [{"question": questions[i % len(questions)], "domain": "math",
             "plans": [random_plan_text(rng, rng.randint(2, 6)) for _ in range(plans_per_request)]}
            for i in range(n)]


def untrained_champion_root(folder: str) -> str:
    """A storage root whose champion (v1, every domain) is the packaged MiniLM with an untrained reward head."""
    from orchrm_dagster.rm import InputSpec, write_input_spec
    from orchrm_dagster.rm.champions import write_champions
    from orchrm_dagster.rm.config import backbone_path
    from orchrm_dagster.rm.train import load_backbone

    base = Path(folder, "checkpoints", "rm")
    model_dir = base / "v0001" / "model"
    model, tokenizer = load_backbone(backbone_path(None), seed=0)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    write_input_spec(str(model_dir), InputSpec())
    write_champions(base, {"choice": 1, "math": 1, "qa": 1})
    return folder


def start_server(storage: str, port: int, max_batch_plans: int, max_wait_ms: float, token: str) -> subprocess.Popen:
    orchrm = Path(sys.executable).with_name("orchrm")
    server = subprocess.Popen([str(orchrm), "--storage", storage, "serve", "--port", str(port), "--device", "cpu",
                               "--max-batch-plans", str(max_batch_plans), "--max-wait-ms", str(max_wait_ms)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env={**os.environ, "ORCHRM_SERVE_TOKEN": token})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"orchrm serve exited with {server.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/health").status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    server.terminate()
    raise SystemExit("orchrm serve did not become healthy")


def run_level(url: str, pool: list[dict], clients: int, seconds: float, auth: dict[str, str]) -> dict:
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    start = threading.Barrier(clients)

    def client(index: int) -> None:
        mine = []
        with httpx.Client(timeout=900, headers=auth) as http:
            start.wait()
            i = index
            while time.monotonic() < stop_at:
                sent = time.perf_counter()
                answer = http.post(f"{url}/v1/score", json=pool[i % len(pool)])
                mine.append(time.perf_counter() - sent)
                if answer.status_code != 200:
                    errors[0] += 1
                i += clients
        with lock:
            latencies.extend(mine)

    before = httpx.get(f"{url}/v1/stats", headers=auth).json()
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    after = httpx.get(f"{url}/v1/stats", headers=auth).json()
    batches = after["batches"] - before["batches"]
    ordered = sorted(latencies)
    return {"clients": clients, "requests": len(latencies), "errors": errors[0],
            "rps": len(latencies) / elapsed, "p50": statistics.median(ordered) * 1000,
            "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000,
            "per_batch": (after["requests"] - before["requests"]) / batches if batches else 0.0,
            "load": f"{load_before:.1f} -> {os.getloadavg()[0]:.1f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--storage", default=None, help="a storage root with a champion (default: an untrained "
                                                        "MiniLM head in a temporary root)")
    parser.add_argument("--plans", type=int, default=8, help="plans per request")
    parser.add_argument("--seconds", type=float, default=20.0, help="per concurrency level")
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--max-batch-plans", type=int, default=64)
    parser.add_argument("--max-wait-ms", type=float, default=5.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        storage = args.storage or untrained_champion_root(scratch)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        token = secrets.token_hex(32)
        auth = {"Authorization": f"Bearer {token}"}
        server = start_server(storage, port, args.max_batch_plans, args.max_wait_ms, token)
        url = f"http://127.0.0.1:{port}"
        try:
            pool = requests_pool(64, args.plans)
            health = httpx.get(f"{url}/v1/health").json()
            for warm_up in pool[:3]:
                httpx.post(f"{url}/v1/score", json=warm_up, headers=auth, timeout=900).raise_for_status()
            source = f"--storage {storage}" if args.storage else "an untrained MiniLM head"
            print(f"champion {health['champions']} from {source}; "
                  f"{args.plans} plans/request, {args.seconds:.0f} s per level, --max-batch-plans "
                  f"{args.max_batch_plans} --max-wait-ms {args.max_wait_ms}, {os.cpu_count()} CPUs")
            print(f"{'clients':>7} {'requests':>8} {'errors':>6} {'req/s':>7} {'plans/s':>8} {'p50 ms':>8} "
                  f"{'p99 ms':>8} {'req/batch':>9}  load avg (1 min)")
            for clients in (int(c) for c in args.clients.split(",")):
                row = run_level(url, pool, clients, args.seconds, auth)
                print(f"{row['clients']:>7} {row['requests']:>8} {row['errors']:>6} {row['rps']:>7.2f} "
                      f"{row['rps'] * args.plans:>8.1f} {row['p50']:>8.0f} {row['p99']:>8.0f} {row['per_batch']:>9.1f}"
                      f"  {row['load']}", flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
