"""What the main job makes, sized so that `make run` ends within 8 minutes on 2 CPU cores (docs/benchmarks.md). Apart
from `main_job` so that the CLI reads its defaults (its flags are generated from these fields) without importing
Dagster."""

from __future__ import annotations

from orchrm_dagster.engine_config import Field, engine_config


@engine_config
class MainJobOptions:
    benchmark: str = Field(default="gsm8k", description="The benchmark whose problems the runs answer")
    # Real MAS runs cost about a minute of decoding per plan batch and per sub-agent round on 2 cores, and one
    # policy's plans share batches: the main job executes the few-shot ("specialized") policy only
    policies: tuple[str, ...] = Field(
        default=("smollm2-fewshot",), description="Policies whose plans are sampled and executed, configured ones or "
                                                  "checkpoints; all: every configured one")
    problem_limit: int = Field(default=1, description="The first N problems whose plans are sampled and executed")
    n_samples: int = Field(default=2, description="Plans sampled per problem")
    # ~560 pairs on 150 problems: those the reward model trains on, and a validation split with at least
    # min_validation_pairs (20) pairs in each domain, which a champion must show it beats chance on (400 runs, 50
    # problems, left 5 and 10 validation pairs in math and qa: no champion)
    history_runs: int = Field(default=1200, description="Runs in the generated history batch the first reward model "
                                                        "learns from")
    max_train_pairs: int = Field(default=128, description="Pairs the first reward model trains on at most")
    held_out_problems: int = Field(default=12, description="Held-out problems whose runs the evaluation chooses among")
    held_out_samples: int = Field(default=8, description="Runs per held-out problem (the evaluation's largest N)")
