"""kill -9 during the loop's rounds for longer than the slow test does: the daemon with its rounds on (SIMULATED
environment, tiny random models, small rounds), killed at a random moment of each round, the daemon's process group
or the round's training process at random, then started again as a user would. Prints each kill, how long the loop
took to get past it, and the invariants (tests/round_kills.py) checked after every kill and at the end.

    .venv/bin/python bench/round_kills.py --rounds 4 --kills-per-round 2 --seed 1
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.round_kills import (DAEMON, FIXED_KILLS, TRAINING, RoundKills, check_invariants, loop_environment,  # noqa: E402
                               no_process_left)
from tests.test_daemon_loop import Daemon, value  # noqa: E402
from tests.tiny_models import make_tiny_backbone, make_tiny_policy  # noqa: E402


def cpu_flags() -> str:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return platform.processor()
    return ", ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16") if f in flags) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--kills-per-round", type=int, default=2)
    parser.add_argument("--no-fixed-points", dest="fixed_points", action="store_false",
                        help="skip the kills at each named point of round 1 (tests/round_kills.FIXED_KILLS), which CI's "
                             "test makes only in part (CI_KILLS)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--within-s", type=float, nargs=2, default=(3.0, 40.0),
                        help="a kill lands this many seconds into a round's training process, at random")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="orchrm-round-kills-"))
    attempts = args.kills_per_round + (len(FIXED_KILLS) if args.fixed_points else 0) + 3
    os.environ.update(loop_environment(work / "faults", rounds=args.rounds, attempts=attempts))
    tiny = (make_tiny_policy(work / "policy"), make_tiny_backbone(work / "rm"))
    print(f"CPU: {os.cpu_count()} cores, flags: {cpu_flags()}; work folder {work}")
    daemon = Daemon(work, tiny, attempts=attempts)
    kills = RoundKills(daemon, work / "faults")
    started = time.monotonic()
    try:
        kills.start_rounds(work)
        for point, target in FIXED_KILLS if args.fixed_points else ():  # in the order round 1 reaches them
            kill = kills.kill_at(point, target)
            print(f"round 1: kill -9 of {kill.target} at {point}: {kill.processes} processes ended", flush=True)
        for number in range(1, args.rounds + 1):
            for _ in range(args.kills_per_round):
                kill = kills.kill_randomly(rng, rng.choice((DAEMON, TRAINING)), tuple(args.within_s))
                print(f"round {number}: kill -9 of {kill.target}, {kill.what}: {kill.processes} processes ended",
                      flush=True)
            seconds = kills.wait(f"round {number}", lambda n=number: value(daemon.query(
                "select count(*) n from grpo_rounds")) == n)
            print(f"round {number} recorded {seconds:.0f} s after its last kill", flush=True)
        check_invariants(daemon)
        left = no_process_left(daemon)
        print(f"{len(kills.kills)} kills in {time.monotonic() - started:.0f} s; invariants hold; processes of killed "
              f"runs left: {len(left)}")
        for row in daemon.query("select round, verdict, heldout_correct_after, heldout_plans_after from grpo_rounds "
                                "order by round"):
            print(f"  round {row['round']}: {row['verdict']}, held-out {row['heldout_correct_after']}/"
                  f"{row['heldout_plans_after']} (SIMULATED)")
    finally:
        daemon.stop()


if __name__ == "__main__":
    main()
