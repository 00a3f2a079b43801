"""The configs of plan sampling and plan execution."""

from __future__ import annotations

import dataclasses
from typing import Literal

from orchrm_dagster.engine_config import Field, engine_config, sections_config
from orchrm_dagster.environments import ENVIRONMENTS, environments
from orchrm_dagster.mas import AgentSettings
from orchrm_dagster.rm import ScoringSettings

EnvironmentName = ENVIRONMENTS.name_type
EnvironmentSettings = sections_config(
    "EnvironmentSettings", "Each environment's own settings, by name (read only for the chosen `environment`).",
    environments(), __name__)


@engine_config
class PlanSamplingSettings:
    n_samples: int = Field(default=2, description="Plans sampled per problem (the paper: 8)")
    problem_limit: int = Field(default=4, description="The first N problems of the benchmark")
    problem_ids: tuple[str, ...] = Field(default=(), description="Exactly these problems instead")
    seed: int = Field(default=0, description="Seeds every sample (with the problem and sample index)")
    run_tag: str = Field(default="", description="Set in the run ids, apart from what is sampled (a loop's rollouts: "
                                                 "their execution's key, so a run is reused only when it was made "
                                                 "under the same environment and execution settings)")


@engine_config
class ExecutionSettings:
    subagent_temperature: float = Field(default=0.0, description="Sub-agents' sampling temperature (0: greedy)")
    subagent_max_new_tokens: int = Field(default=192, description="Token budget of each sub-agent call")
    plan_timeout_s: float | None = Field(
        default=300.0, description="Wall-clock budget per plan; over it the run fails (unset: none)")
    concurrent_plans: int = Field(default=8, description="Plans executed at once; with an in-process backend "
                                  "(transformers, vllm) their sub-agent calls share batches")
    agents: AgentSettings = Field(default_factory=AgentSettings, description="How each kind of sub-agent works")
    corpus: str | None = Field(
        default="hotpotqa", description="WebSearchAgent's BM25 corpus: a shipped corpus (hotpotqa: HotpotQA's "
                                        "distractor-setting paragraphs, which contain the supporting facts) or a JSONL "
                                        "file with id/text fields; unset: no retrieval (it answers with one CoT call)")
    selection: Literal["all", "orchrm_bon"] = Field(
        default="all", description="all: execute every sampled plan; orchrm_bon: the champion reward model scores "
                                   "the first best_of_n plans of each problem and only the best is executed")
    best_of_n: int = Field(default=8, description="Candidates per problem with selection=orchrm_bon")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings,
                                     description="How the reward model scores plans with selection=orchrm_bon")
    environment: EnvironmentName = Field(
        default="agents", description="Where plans execute and where their correctness comes from: "
                                      + ENVIRONMENTS.described())
    environment_settings: EnvironmentSettings = Field(default_factory=EnvironmentSettings,
                                                      description="Each environment's own settings section, by name")

    @property
    def run_tag(self) -> str:
        """A short key of everything that decides what an executed run says (the environment, its own settings and
        truth, the sub-agents' settings; not how many plans run at once): runs tagged alike were made alike."""
        import hashlib
        import json

        from orchrm_dagster.engine_config import config_to_json

        shaped = config_to_json(self)
        shaped.pop("concurrent_plans", None)
        return hashlib.sha256(json.dumps(shaped, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def in_environment(self, environment: str | None, truth: str | None = None) -> "ExecutionSettings":
        """These settings with plans executed in `environment` (None: as they are, or the simulated environment when a
        `truth` is given: a truth function decides correctness only there) and, for a simulated one, its truth
        function `truth` (None: as configured)."""
        environment = environment or ("simulated" if truth else None)
        changed = self if environment is None else dataclasses.replace(self, environment=environment)
        if truth is None:
            return changed
        simulated = dataclasses.replace(changed.environment_settings.simulated, truth=truth)
        return dataclasses.replace(changed, environment_settings=dataclasses.replace(
            changed.environment_settings, simulated=simulated))

    def __post_init__(self) -> None:
        if self.best_of_n < 1:
            raise ValueError("best_of_n must be >= 1")
        if self.corpus is not None and not self.corpus.strip():
            raise ValueError("corpus must be a shipped corpus name or a file path (unset it for no retrieval)")
