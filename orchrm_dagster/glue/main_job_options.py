"""What the main job makes, sized so that `make run` ends within 8 minutes on 2 CPU cores (README, Benchmarks). Apart
from `main_job` so that the CLI reads its defaults without importing Dagster."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MainJobOptions:
    benchmark: str = "gsm8k"
    # Real MAS runs cost about a minute of decoding per plan batch and per sub-agent round on 2 cores, and one
    # policy's plans share batches: the main job executes the few-shot ("specialized") policy only; () = every
    # registered policy
    policies: tuple[str, ...] = ("smollm2-fewshot",)
    problem_limit: int = 1
    n_samples: int = 2
    # ~560 pairs on 150 problems: those the reward model trains on, and a validation split with at least
    # min_validation_pairs (20) pairs in each domain, which a champion must show it beats chance on (400 runs, 50
    # problems, left 5 and 10 validation pairs in math and qa: no champion)
    history_runs: int = 1200
    max_train_pairs: int = 128
    held_out_problems: int = 12
    held_out_samples: int = 8
