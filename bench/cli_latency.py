"""How long the everyday commands take to answer, on a storage root (default: the one `make run` leaves, ./storage),
each run in a fresh process as a user types it: `orchrm status`, `orchrm config show`, `orchrm config check` and
`dg list defs` (the code location loaded by dg's own subprocess). Prints each command's median and range of wall
seconds over --repeats runs, the CPU and its flags, and the load average beside them (the numbers move with load).

    .venv/bin/python bench/cli_latency.py [--root storage] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def cpu() -> str:
    try:
        lines = open("/proc/cpuinfo").read().splitlines()
    except OSError:
        return platform.processor()
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "?")
    flags = next((line.split() for line in lines if line.startswith("flags")), [])
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags] or ["none"]
    return f"{model}, {os.cpu_count()} cores, flags: {', '.join(shown)}"


def timed(command: list[str], env: dict, repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="storage", help="the storage root (default: ./storage, make run's)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    settings = Path(tempfile.mkdtemp()) / "orchrm.yaml"
    settings.write_text("")  # the defaults, whatever orchrm.yaml the folder holds
    env = {**os.environ, "ORCHRM_STORAGE": args.root, "ORCHRM_CONFIG": str(settings)}
    commands = {
        "orchrm status": [str(BIN / "orchrm"), "status"],
        "orchrm config show": [str(BIN / "orchrm"), "config", "show"],
        "orchrm config check": [str(BIN / "orchrm"), "config", "check"],
        "dg list defs": [str(BIN / "dg"), "list", "defs"],
    }
    print(f"# {cpu()}; root {args.root}; {args.repeats} runs each")
    print("| command | median s | min s | max s | load average before |")
    print("|---|---|---|---|---|")
    for name, command in commands.items():
        load = os.getloadavg()[0]
        seconds = timed(command, {**env, "PATH": f"{BIN}:{env.get('PATH', '')}"}, args.repeats)
        print(f"| `{name}` | {statistics.median(seconds):.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
              f"{load:.2f} |", flush=True)


if __name__ == "__main__":
    main()
