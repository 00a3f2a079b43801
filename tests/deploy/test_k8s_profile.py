"""The k8s deployment profile without a cluster: the code location with the k8s executor, the instance's run
launcher and Postgres storage as dagster-k8s / dagster-postgres parse them, the pod each step would get, and the
Helm values against the keys the official chart documents."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
POLICY_ASSETS = {"orchestration_samples", "execution_artifacts", "grpo_round"}
GPU_ASSETS = {"orchestration_samples", "execution_artifacts", "reward_model", "rm_scores", "plan_scores", "grpo_round",
              "evaluation"}


@pytest.fixture
def k8s_defs(monkeypatch):
    monkeypatch.setenv("ORCHRM_DEPLOYMENT", "k8s")
    from orchrm_dagster.definitions import build_definitions

    return build_definitions()


def test_the_k8s_profile_runs_every_job_with_the_k8s_job_executor(k8s_defs):
    import dagster as dg

    dg.Definitions.validate_loadable(k8s_defs)
    jobs = [job for job in k8s_defs.resolve_all_job_defs()]
    assert jobs and {job.executor_def.name for job in jobs} == {"k8s"}


def test_an_unknown_profile_is_refused(monkeypatch):
    from assets.deployment import profile

    monkeypatch.setenv("ORCHRM_DEPLOYMENT", "swarm")
    with pytest.raises(ValueError, match="local, k8s"):
        profile()


def _config_errors(config_type, value) -> list[str]:
    from dagster._config import process_config

    result = process_config(config_type, value)
    return [] if result.success else [error.message for error in result.errors]


def test_the_shipped_instance_config_parses_as_dagster_k8s_and_dagster_postgres_take_it(monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "secret")  # the pods get it from the Postgres secret
    from dagster_k8s import K8sRunLauncher
    from dagster_postgres import DagsterPostgresStorage

    instance = yaml.safe_load((ROOT / "deploy/k8s/dagster-instance.yaml").read_text())
    assert instance["run_launcher"]["class"] == "K8sRunLauncher"
    assert _config_errors(K8sRunLauncher.config_type(), instance["run_launcher"]["config"]) == []
    assert _config_errors(DagsterPostgresStorage.config_type(), instance["storage"]["postgres"]) == []


def _pod(defs, asset: str):
    from dagster_k8s.job import DagsterK8sJobConfig, construct_dagster_k8s_job, get_user_defined_k8s_config

    node = defs.resolve_asset_graph().get(next(k for k in defs.resolve_asset_graph().get_all_asset_keys()
                                                if k.to_user_string() == asset))
    tags = node.assets_def.op.tags
    config = DagsterK8sJobConfig(job_image="orchrm:cuda", dagster_home="/opt/dagster/dagster_home",
                                 image_pull_policy="IfNotPresent", instance_config_map="dagster-instance",
                                 postgres_password_secret="dagster-postgresql-secret")
    job = construct_dagster_k8s_job(config, ["dagster", "api", "execute_step"], f"orchrm-{asset.replace('_', '-')}",
                                    user_defined_k8s_config=get_user_defined_k8s_config(tags))
    return job.spec.template.spec


@pytest.mark.parametrize("asset", sorted(GPU_ASSETS))
def test_gpu_steps_get_a_gpu_pod_on_the_gpu_pool(k8s_defs, asset):
    spec = _pod(k8s_defs, asset)
    assert spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert spec.node_selector == {"orchrm.ai/pool": "gpu"}
    assert any(t.key == "nvidia.com/gpu" for t in spec.tolerations)


@pytest.mark.parametrize("asset", ["runs", "labels", "pairs", "problems"])
def test_cpu_steps_ask_for_cpu_only(k8s_defs, asset):
    spec = _pod(k8s_defs, asset)
    resources = spec.containers[0].resources
    assert "nvidia.com/gpu" not in (resources.limits or {}) and resources.requests["cpu"]
    assert not spec.node_selector


# The keys of the official chart's values this file may use, as its values schema documents them (chart `dagster`:
# DagsterHelmValues, UserDeployment, RunLauncher / K8sRunLauncherConfig, PostgreSQL, Daemon, Concurrency).
DOCUMENTED = {
    "global": {"postgresqlSecretName", "serviceAccountName", "dagsterHome", "celeryConfigSecretName"},
    "dagster-user-deployments": {"enabled", "enableSubchart", "imagePullSecrets", "deployments"},
    "dagster-user-deployments.deployments[]": {
        "name", "image", "port", "dagsterApiGrpcArgs", "codeServerArgs", "includeConfigInLaunchedRuns", "env",
        "envConfigMaps", "envSecrets", "annotations", "nodeSelector", "affinity", "tolerations", "podSecurityContext",
        "securityContext", "resources", "livenessProbe", "readinessProbe", "startupProbe", "labels", "volumeMounts",
        "volumes", "schedulerName"},
    "dagster-user-deployments.deployments[].image": {"repository", "tag", "pullPolicy"},
    "runLauncher": {"type", "config"},
    "runLauncher.config": {"celeryK8sRunLauncher", "k8sRunLauncher", "customRunLauncher"},
    "runLauncher.config.k8sRunLauncher": {
        "image", "imagePullPolicy", "jobNamespace", "loadInclusterConfig", "kubeconfigFile", "envConfigMaps",
        "envSecrets", "envVars", "volumeMounts", "volumes", "labels", "failPodOnRunFailure", "resources",
        "schedulerName", "securityContext", "runK8sConfig"},
    "postgresql": {"postgresqlScheme", "image", "enabled", "postgresqlHost", "postgresqlUsername",
                   "postgresqlPassword", "postgresqlDatabase", "postgresqlParams", "service"},
    "postgresql.service": {"port"},
    "dagsterDaemon": {"enabled", "image", "runMonitoring", "runCoordinator", "heartbeatTolerance", "env",
                      "envConfigMaps", "envSecrets", "resources", "nodeSelector", "tolerations", "affinity"},
    "concurrency": {"enabled", "pools", "runs"},
    "concurrency.pools": {"defaultLimit", "granularity", "opGranularityRunBuffer"},
    "telemetry": {"enabled"},
}
TOP_LEVEL = {"dagsterWebserver", "dagster-user-deployments", "postgresql", "generatePostgresqlPasswordSecret",
             "generateCeleryConfigSecret", "rabbitmq", "redis", "flower", "ingress", "imagePullSecrets",
             "computeLogManager", "scheduler", "runLauncher", "pythonLogs", "dagsterDaemon", "busybox", "migrate",
             "telemetry", "serviceAccount", "global", "retention", "concurrency", "additionalInstanceConfig"}
# Values that are Kubernetes objects or free-form lists, checked by Kubernetes rather than by the chart's keys.
OPAQUE = {"env", "envSecrets", "envConfigMaps", "envVars", "resources", "dagsterApiGrpcArgs", "tolerations",
          "nodeSelector"}


def _undocumented(values: dict, path: str = "") -> list[str]:
    allowed = TOP_LEVEL if not path else DOCUMENTED.get(path)
    found = []
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if allowed is None or key not in allowed:
            found.append(where)
            continue
        if key in OPAQUE:
            continue
        if isinstance(value, dict):
            found += _undocumented(value, where)
        elif isinstance(value, list) and value and isinstance(value[0], dict) and f"{where}[]" in DOCUMENTED:
            for item in value:
                found += _undocumented(item, f"{where}[]")
    return found


def test_the_helm_values_use_only_keys_the_chart_documents():
    values = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())
    assert _undocumented(values) == []
    assert values["runLauncher"]["type"] == "K8sRunLauncher" and values["postgresql"]["enabled"] is True
    [deployment] = values["dagster-user-deployments"]["deployments"]
    env = {e["name"]: e["value"] for e in deployment["env"]}
    assert env["ORCHRM_DEPLOYMENT"] == "k8s" and env["ORCHRM_STORAGE"].startswith("s3://")
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "orchrm_dagster.definitions"]


def test_the_key_check_catches_a_misspelt_key():
    assert _undocumented({"runLauncher": {"type": "K8sRunLauncher", "config": {"k8sRunLauncher": {"envVar": []}}}}) \
        == ["runLauncher.config.k8sRunLauncher.envVar"]


def test_the_vllm_manifest_serves_the_openai_api_on_a_gpu_node():
    deployment, service = yaml.safe_load_all((ROOT / "deploy/k8s/vllm-server.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1" and container["ports"][0]["containerPort"] == 8000
    assert service["spec"]["ports"][0]["port"] == 8000


def test_the_llm_config_the_vllm_manifest_documents_is_what_the_llm_resource_takes():
    from assets.resources import LLMBackendResource

    header = next(line for line in (ROOT / "deploy/k8s/vllm-server.yaml").read_text().splitlines()
                  if "llm resource config" in line)
    documented = yaml.safe_load(header.split("llm resource config ", 1)[1].rstrip(".").replace("<served name>", "m"))
    spec = LLMBackendResource(**documented).spec()
    assert (spec.kind, spec.base_url, spec.model) == ("openai", "http://vllm.orchrm.svc:8000/v1", "m")


@pytest.mark.skipif(shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode,
                    reason="no Docker engine on this machine (the docker client alone cannot build)")
def test_the_cpu_image_builds():
    subprocess.run(["docker", "build", "-f", "deploy/Dockerfile", "-t", "orchrm:test", "."], cwd=ROOT, check=True)


def test_the_grpo_vllm_manifest_runs_trls_weight_syncing_server_on_a_gpu_node():
    from orchrm_dagster.grpo import GRPOSettings

    deployment, service = yaml.safe_load_all((ROOT / "deploy/k8s/trl-vllm-serve.yaml").read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["trl", "vllm-serve"] and "--model" in container["args"]
    port = int(container["args"][container["args"].index("--port") + 1])
    assert port == container["ports"][0]["containerPort"] == service["spec"]["ports"][0]["port"] == 8000
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": port}  # what TRL's VLLMClient polls
    documented = GRPOSettings.__pydantic_fields__["vllm_server_url"].description
    assert f"http://{service['metadata']['name']}.orchrm.svc:{port}" in documented and "trl vllm-serve" in documented
    assert "trl-vllm-serve.yaml" in (ROOT / "deploy/k8s/vllm-server.yaml").read_text().split("apiVersion")[0]


def test_a_steps_pool_and_its_pod_agree(k8s_defs):
    """A step that asks for a GPU pod waits in a model's pool (the reward model's `gpu`, or the policy's `policy`:
    sampling and rounds), and only such a step: the two are one decision."""
    graph = k8s_defs.resolve_asset_graph()
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        if node.assets_def.op.tags is None or node.is_external:
            continue
        gpu = "nvidia.com/gpu" in str(node.assets_def.op.tags.get("dagster-k8s/config", ""))
        policy = key.to_user_string() in POLICY_ASSETS
        assert node.assets_def.op.pool == ("warehouse" if not gpu else "policy" if policy else "gpu"), key

        assert gpu == (key.to_user_string() in GPU_ASSETS), key.to_user_string()
