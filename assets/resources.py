"""Dagster resources: where the data lives, which LLM the sub-agents use, which orchestrator policies exist.
Their fields are generated from the engine's configs; defaults run on the embedded setup."""

from __future__ import annotations

import dagster as dg

from assets.config_bridge import EngineResource, dagster_config, from_engine
from orchrm_dagster.llm import BackendSpec, LLMBackend, LLMSettings, build_backend
from orchrm_dagster.loop import LoopSettings
from orchrm_dagster.orchestration import EMBEDDED_POLICIES, PolicySpec
from orchrm_dagster.settings import RunDefaults
from orchrm_dagster.storage import StorageRoot, StorageSettings, Warehouse, storage_settings

PolicyConfig = dagster_config(PolicySpec, "PolicyConfig")


class StorageResource(dagster_config(StorageSettings, "StorageResourceFields", base=EngineResource)):
    """The storage root: a local folder (default `storage/`, or ORCHRM_STORAGE) or `s3://bucket/prefix`."""

    def storage_root(self) -> StorageRoot:
        return self.to_engine().storage_root()

    def warehouse(self) -> Warehouse:
        return self.to_engine().warehouse()


def default_storage_resource() -> StorageResource:
    """The storage settings in effect: the settings file's `storage`, its root ORCHRM_STORAGE's when set."""
    return from_engine(StorageResource, storage_settings())


class LLMBackendResource(dagster_config(LLMSettings, "LLMBackendResourceFields", base=EngineResource)):
    """The LLM the sub-agents run on (and the default of every orchestrator policy). Switching backends is config:
    `backend: {<kind>: {<that backend's fields>}}`, a kind being any registered backend (`orchrm_dagster/llm/
    *_backend.py`); by default the embedded SmolLM2 on transformers."""

    def spec(self) -> BackendSpec:
        return self.to_engine().backend

    def build(self) -> LLMBackend:
        return build_backend(self.spec())


class PolicyRegistry(dg.ConfigurableResource):
    """The orchestrator policies; each is a partition key of the `policies` dimension."""

    policies: list[PolicyConfig]

    def all_policies(self, root: StorageRoot | None = None) -> dict[str, PolicySpec]:
        """The configured policies, and (given the storage root) every GRPO checkpoint in `policy_checkpoints`."""
        policies = {policy.name: policy.to_engine() for policy in self.policies}
        if root is not None:
            from orchrm_dagster.grpo import checkpoint_policies

            policies |= {policy.name: policy for policy in checkpoint_policies(root)}
        return policies

    def names(self, root: StorageRoot | None = None) -> list[str]:
        return list(self.all_policies(root))

    def spec(self, name: str, root: StorageRoot | None = None) -> PolicySpec:
        policies = self.all_policies(root)
        if name not in policies:
            raise KeyError(f"no policy named {name!r} in the policy registry or the policy checkpoints "
                           f"(known: {', '.join(policies)})")
        return policies[name]


class LoopResource(dagster_config(LoopSettings, "LoopResourceFields", base=EngineResource)):
    """How the loop keeps learning: when it stops, when the reward model retrains, and the work it asks for
    (rollouts, rounds, reward-model training). The daemon's sensors and `orchrm loop` read the same fields, so the
    UI's loop and the CLI's run identical work."""


class RunDefaultsResource(dagster_config(RunDefaults, "RunDefaultsResourceFields", base=EngineResource)):
    """The assets' run configs as the settings file sets them; a field a run's own config gives replaces the file's
    (`run_configs.run_settings`)."""


def policy_registry(policies=EMBEDDED_POLICIES) -> PolicyRegistry:
    """A registry of these policies (the settings file's `policies`)."""
    return PolicyRegistry(policies=[from_engine(PolicyConfig, policy) for policy in policies])


def embedded_policies() -> PolicyRegistry:
    """The embedded default: SmolLM2 as a base orchestrator, and the same model with a few-shot prompt as a
    stand-in 'specialized' one until a trained orchestrator (a GRPO checkpoint) exists."""
    return policy_registry(EMBEDDED_POLICIES)
