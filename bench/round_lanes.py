"""What `loop.retrain_defer_s` buys under a stream: the loop's own `decide` against the model of the world the stream
property test uses (tests/loop/test_stream.py: batches landing, steps that take time, rollouts landing batches of
their own), with each kind of step taking the seconds the soak measured (bench/soak.py, tiny models, 2 cores), for
several values of the bound. For each it prints the rounds finished, the gap from a round falling due (the previous
round's lane work ended) to its start, the retrainings run, and how stale the champion was when each round started
(seconds since the reward model it trained on last trained). SIMULATED timings: a model of the loop, not the daemon.

    .venv/bin/python bench/round_lanes.py
    .venv/bin/python bench/round_lanes.py --every-s 30 --seconds ingest=20,pairs=15,scores=20,reward_model=120,rollout=40,round=75
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchrm_dagster.loop import LoopSettings, decide  # noqa: E402
from tests.loop.test_stream import World  # noqa: E402

TICK_S = 5.0  # the daemon location's sensor interval
# seconds a step of each kind ran in the soak (bench/soak.py --minutes 60, 2026-12-07, tiny models on 2 cores): the
# median of its successful runs (ingest 44 runs, pairs 33, scores 23, reward_model 15, rollout 10, round 5)
MEASURED_S = {"ingest": 8, "pairs": 4, "scores": 41, "reward_model": 52, "rollout": 63, "round": 173}


def run(settings: LoopSettings, seconds: dict[str, float], hours: float, every_s: float) -> dict:
    world = World(durations={kind: max(1, math.ceil(s / TICK_S)) for kind, s in seconds.items()})
    for _ in range(3):
        world.land()
    every = max(1, round(every_s / TICK_S))
    due_since, gaps, ages, retrainings = None, [], [], 0
    for tick in range(int(hours * 3600 / TICK_S)):
        world.now = tick * TICK_S
        world.finish(tick, lambda number: True)
        if tick % every == 0:
            world.land()
        state = world.state()
        decision = decide(state, settings)
        for step in decision.steps:
            if step.kind == "round":
                if due_since is not None:
                    gaps.append((tick - due_since) * TICK_S)
                ages.append(world.now - (world.trained_at or 0.0))
            retrainings += step.kind == "reward_model"
            world.start(step, tick, state)
        busy = any(key.startswith(("round:", "rollout:")) for key in world.running)
        asked = any(s.kind == "round" for s in decision.steps)
        due = world.version and not busy and not asked and len(world.rounds) < settings.rounds
        due_since = (due_since if due_since is not None else tick) if due else None
    return {"rounds": len(world.rounds), "gaps": gaps, "ages": ages, "retrainings": retrainings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--defer", default="0,300,900,1800,3600", help="retrain_defer_s values")
    parser.add_argument("--hours", type=float, default=4.0)
    parser.add_argument("--every-s", type=float, default=120.0, help="a batch lands every this many seconds")
    parser.add_argument("--retrain-min-new-pairs", type=int, default=30, help="10 pairs a batch in the model")
    parser.add_argument("--seconds", default=",".join(f"{k}={v}" for k, v in MEASURED_S.items()))
    args = parser.parse_args()
    seconds = {k: float(v) for k, v in (part.split("=") for part in args.seconds.split(","))}
    print(f"SIMULATED: the engine's decide over a model of the loop; {args.hours:g} h, a batch every "
          f"{args.every_s:g} s, step seconds {seconds}")
    print("| retrain_defer_s | rounds | due -> start p50 | max | retrainings | champion age at round start p50 |")
    print("|---|---|---|---|---|---|")
    for defer in (float(x) for x in args.defer.split(",")):
        settings = dataclasses.replace(LoopSettings(rounds=10_000, retrain_min_new_pairs=args.retrain_min_new_pairs),
                                       retrain_defer_s=defer)
        found = run(settings, seconds, args.hours, args.every_s)
        gaps = found["gaps"] or [0.0]
        print(f"| {defer:g} | {found['rounds']} | {statistics.median(gaps):.0f} s | {max(gaps):.0f} s | "
              f"{found['retrainings']} | {statistics.median(found['ages'] or [0.0]):.0f} s |")


if __name__ == "__main__":
    main()
