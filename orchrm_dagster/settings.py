"""Every setting of a team's loop in one file, `orchrm.yaml` (or the file ORCHRM_CONFIG names): its sections are the
config classes the CLI's flags and the launchpad's run configs are generated from, so a value is written in the file
as the configuration reference names it (`loop: {round: {learning_rate: 0.001}}`).

Precedence, lowest first: each config's defaults < the file < the environment variables that name a setting
(ORCHRM_STORAGE, ORCHRM_DEPLOYMENT) < a command's flags < a run's own run config (an asset's fields given in it).
`load_settings` is the one function every entry point reads the file through: the code location
(`build_definitions`, so the daemon, the UI, `dagster dev` and `dg`), every `orchrm` command and `orchrm serve`.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import types
import typing
from pathlib import Path
from typing import Literal

from orchrm_dagster.engine_config import Field, config_to_json, engine_config
from orchrm_dagster.evaluation import EvaluationSettings
from orchrm_dagster.ingest import IngestSettings
from orchrm_dagster.labels import LabelSettings
from orchrm_dagster.llm import LLMSettings
from orchrm_dagster.loop import LoopSettings
from orchrm_dagster.orchestration import EMBEDDED_POLICIES, ExecutionSettings, PlanSamplingSettings, PolicySpec
from orchrm_dagster.pairs import PairRules
from orchrm_dagster.problems import ProblemsSettings
from orchrm_dagster.rm import ScoringSettings
from orchrm_dagster.serving import ServeSettings
from orchrm_dagster.settings_file import (NO_FILE, SettingsError, SettingsFile, class_at, read_settings_file,
                                          validated)
from orchrm_dagster.storage import StorageSettings

__all__ = ["DeploymentSettings", "MainJobOptions", "OrchrmSettings", "RunDefaults", "SettingsError",
           "TrainingProcessSettings", "deployment_profile", "load_settings", "setting_sources"]

DEPLOYMENTS = ("local", "k8s")


@engine_config
class TrainingProcessSettings:
    """How a step starts its training process (`reward_model`, `grpo_round`)."""

    launcher: Literal["subprocess", "k8s"] | None = Field(
        default=None, description="subprocess: a child of the run worker on its machine (Dagster Pipes), killed with "
                                  "it; k8s: a pod of its own (dagster-k8s PipesK8sClient); unset: k8s in the k8s "
                                  "deployment profile, else subprocess")
    image: str | None = Field(default=None, description="k8s: the training pod's image (default: the code "
                                                        "location's, DAGSTER_CURRENT_IMAGE)")
    namespace: str | None = Field(default=None, description="k8s: the training pod's namespace (default: the "
                                                            "client's)")


@engine_config
class DeploymentSettings:
    profile: Literal["local", "k8s"] = Field(
        default="local", description="local: every step of a run in the run's own process, a SQLite instance; k8s: "
                                     "each step in its own pod, runs on the K8sRunLauncher, Postgres (docs/scale-out.md;"
                                     " the k8s extra). ORCHRM_DEPLOYMENT, when set, wins")


@engine_config
class MainJobOptions:
    """What the main job (`orchrm main`) makes, sized for 2 CPU cores (its measured time, and on what load:
    docs/benchmarks.md)."""

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


@engine_config
class RunDefaults:
    """The run config of the assets that take one, as the settings file sets it: a field a run's own config gives
    replaces the file's (the reward model's retraining and the GRPO round are the loop's sections)."""

    problems: ProblemsSettings = Field(default_factory=ProblemsSettings, description="The `problems` asset")
    ingest: IngestSettings = Field(default_factory=IngestSettings, description="Ingestion of each run batch")
    labels: LabelSettings = Field(default_factory=LabelSettings, description="The `labels` asset")
    sampling: PlanSamplingSettings = Field(default_factory=PlanSamplingSettings,
                                           description="The `orchestration_samples` asset")
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings,
                                         description="The `execution_artifacts` asset")
    pairs: PairRules = Field(default_factory=PairRules, description="The `pairs` asset")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings, description="`rm_scores` and `plan_scores`")
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings, description="The `evaluation` asset")


@engine_config
class OrchrmSettings:
    """The settings file's sections, each a config class of its own; a section left out keeps its defaults."""

    storage: StorageSettings = Field(default_factory=StorageSettings,
                                     description="Where the data lives: a local folder or s3://bucket/prefix")
    llm: LLMSettings = Field(default_factory=LLMSettings, description="The sub-agents' LLM backend (and the one every "
                                                                      "policy starts from)")
    policies: tuple[PolicySpec, ...] = Field(
        default=EMBEDDED_POLICIES, description="The orchestrator policies (the `policies` partitions); a list given "
                                               "here replaces the embedded two")
    problems: ProblemsSettings = Field(default_factory=ProblemsSettings, description="The problems table")
    ingest: IngestSettings = Field(default_factory=IngestSettings, description="Ingestion of each run batch")
    labels: LabelSettings = Field(default_factory=LabelSettings, description="How runs are labeled")
    sampling: PlanSamplingSettings = Field(default_factory=PlanSamplingSettings,
                                           description="Sampling plans (`orchestration_samples`)")
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings,
                                         description="Executing plans (`execution_artifacts`, `orchrm orchestrate`)")
    pairs: PairRules = Field(default_factory=PairRules, description="The pair rules")
    scoring: ScoringSettings = Field(default_factory=ScoringSettings, description="Scoring runs and plans")
    evaluation: EvaluationSettings = Field(default_factory=EvaluationSettings,
                                           description="Best-of-N evaluation (`orchrm evaluate`)")
    loop: LoopSettings = Field(default_factory=LoopSettings,
                               description="The loop: its rounds (`round`), rollouts, reward-model retraining "
                                           "(`reward_model`) and batching")
    training: TrainingProcessSettings = Field(default_factory=TrainingProcessSettings,
                                              description="Where training runs")
    serving: ServeSettings = Field(default_factory=ServeSettings, description="`orchrm serve`")
    deployment: DeploymentSettings = Field(default_factory=DeploymentSettings, description="The deployment profile")
    main: MainJobOptions = Field(default_factory=MainJobOptions, description="`orchrm main`")

    def run_defaults(self) -> RunDefaults:
        return RunDefaults(**{field.name: getattr(self, field.name) for field in dataclasses.fields(RunDefaults)})


# environment variable -> the setting it sets (over the file's value)
ENVIRONMENT = {"ORCHRM_STORAGE": ("storage", "root"), "ORCHRM_DEPLOYMENT": ("deployment", "profile")}


def load_settings(path: Path | None = None) -> OrchrmSettings:
    """The settings in effect: the defaults, the settings file's values over them (`path`, else ORCHRM_CONFIG's file,
    else ./orchrm.yaml), the environment variables' over those. A SettingsError naming file, line and key when the
    file breaks the schema."""
    file = read_settings_file(path)
    settings = validated(OrchrmSettings, file_values(file), file)
    _check_policies(settings, file)
    for name, loc in ENVIRONMENT.items():
        if os.environ.get(name):
            settings = _replaced(settings, loc, os.environ[name], name)
    if os.environ.get("ORCHRM_STORAGE"):  # another root: the file's warehouse file and endpoint are its root's
        settings = dataclasses.replace(settings, storage=StorageSettings(root=os.environ["ORCHRM_STORAGE"]))
    return settings


def _check_policies(settings: OrchrmSettings, file: SettingsFile) -> None:
    """Each policy's prompt is found, and no two policies share a name: here, with the line, not at the first plan."""
    from orchrm_dagster.mas import load_prompt

    seen = set()
    for index, policy in enumerate(settings.policies):
        where = file.where(("policies", index, "prompt")) if file.path else "settings"
        try:
            load_prompt(policy.prompt)
        except KeyError as err:
            raise SettingsError(f"{where}: policies.{index}.prompt: {err.args[0]}") from None
        if policy.name in seen:
            raise SettingsError(f"{file.where(('policies', index, 'name')) if file.path else 'settings'}: "
                                f"policies.{index}.name: {policy.name!r} is named twice")
        seen.add(policy.name)


def file_values(file: SettingsFile) -> dict:
    """The file's values as the config classes take them: a backend or other union written as a selector
    (`backend: {openai: {model: ...}}`, as the launchpad shows it) is given its `kind`."""
    return _with_kinds(OrchrmSettings, copy.deepcopy(file.data))


def _with_kinds(cls, value):
    cls = _unannotated(cls)
    if value is None and hasattr(_plain_config(cls), "__pydantic_fields__"):
        return {}  # `loop:` with every key commented out: the section's defaults
    if isinstance(value, dict) and hasattr(cls, "__pydantic_fields__"):
        return {key: _with_kinds(cls.__pydantic_fields__[key].annotation, item)
                if key in cls.__pydantic_fields__ else item for key, item in value.items()}
    origin, args = typing.get_origin(cls), typing.get_args(cls)
    if origin in (tuple, list) and isinstance(value, list):
        return [_with_kinds(args[0], item) for item in value]
    if origin is dict and isinstance(value, dict):
        return {key: _with_kinds(args[1], item) for key, item in value.items()}
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        if (len(members) > 1 and isinstance(value, dict) and len(value) == 1 and "kind" not in value
                and isinstance(next(iter(value.values())), (dict, type(None)))):
            kind, fields = next(iter(value.items()))
            member = class_at(cls, (kind,)) if isinstance(kind, str) else None
            return {"kind": kind, **(_with_kinds(member, fields) if member else fields or {})}
        if len(members) == 1:
            return _with_kinds(members[0], value)
    return value


def _plain_config(annotation):
    """`annotation` without Annotated and Optional: a config class, where it is one."""
    annotation = _unannotated(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _unannotated(rest[0]) if len(rest) == 1 else annotation
    return annotation


def _unannotated(annotation):
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _replaced(settings, loc, value, source: str):
    head, rest = loc[0], loc[1:]
    try:
        inner = _replaced(getattr(settings, head), rest, value, source) if rest else value
        return dataclasses.replace(settings, **{head: inner})
    except ValueError as err:  # pydantic's ValidationError too
        raise SettingsError(f"{source}={value!r}: {err}") from None


def deployment_profile() -> str:
    """The deployment profile: ORCHRM_DEPLOYMENT, else the settings file's `deployment.profile`, else local."""
    named = os.environ.get("ORCHRM_DEPLOYMENT")
    if named:
        if named not in DEPLOYMENTS:
            raise SettingsError(f"ORCHRM_DEPLOYMENT={named!r}: expected one of {', '.join(DEPLOYMENTS)}")
        return named
    file = read_settings_file()
    return validated(DeploymentSettings, file.section("deployment"), file, ("deployment",)).profile


def setting_sources(settings: OrchrmSettings, file: SettingsFile = NO_FILE) -> list[tuple[str, object, str]]:
    """(dotted key, value, where it came from) of every setting in effect: `default`, the file and the line of the
    key (or of the section holding it), or the environment variable."""
    from_environment = {".".join(loc): name for name, loc in ENVIRONMENT.items() if os.environ.get(name)}
    in_file = {key for key, _ in _leaves(file_values(file))}
    leaves = dict(_leaves(config_to_json(settings)))
    rows = []
    for key, value in leaves.items():
        loc = tuple(int(part) if part.isdigit() else part for part in key.split("."))
        kind = leaves.get(".".join(map(str, loc[:-1] + ("kind",))))
        selector = loc[:-1] + (kind, loc[-1])  # where a union written as a selector has the key
        line = file.line_of(selector if file.given(selector) else loc)
        source = (f"${from_environment[key]}" if key in from_environment else
                  f"{file.path.name}:{line}" if key in in_file else "default")
        rows.append((key, value, source))
    return rows


def _leaves(value, prefix: str = ""):
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, f"{prefix}{key}.")
    elif isinstance(value, list) and value and any(isinstance(item, dict) for item in value):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{prefix}{index}.")
    else:
        yield prefix.removesuffix("."), value
