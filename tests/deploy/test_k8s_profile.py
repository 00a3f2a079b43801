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


# --- the team's settings file: the orchrm-config ConfigMap in every pod that runs orchrm code -------------------------

SETTINGS_PATH = "/etc/orchrm/orchrm.yaml"


def _mounts_the_settings(volumes: list[dict], mounts: list[dict], env: dict[str, str]) -> bool:
    """The orchrm-config ConfigMap mounted where ORCHRM_CONFIG points."""
    [volume] = [v for v in volumes if v["name"] == "orchrm-config"]
    [mount] = [m for m in mounts if m["name"] == "orchrm-config"]
    key = (volume.get("configMap") or volume.get("config_map"))["name"]
    path = mount.get("mountPath") or mount.get("mount_path")
    return key == "orchrm-config" and env["ORCHRM_CONFIG"] == f"{path}/orchrm.yaml" == SETTINGS_PATH


def test_the_configmap_holds_a_settings_file_orchrm_accepts(tmp_path, monkeypatch):
    from orchrm_dagster.settings import load_settings

    for name in ("ORCHRM_STORAGE", "ORCHRM_DEPLOYMENT"):  # the file's own, not the test's
        monkeypatch.delenv(name, raising=False)

    config_map = yaml.safe_load((ROOT / "deploy/k8s/orchrm-config.yaml").read_text())
    assert config_map["kind"] == "ConfigMap" and config_map["metadata"]["name"] == "orchrm-config"
    file = tmp_path / "orchrm.yaml"
    file.write_text(config_map["data"]["orchrm.yaml"])
    settings = load_settings(file)
    assert settings.deployment.profile == "k8s" and settings.storage.root.startswith("s3://")


def test_the_code_location_and_the_run_launcher_mount_the_settings_file():
    values = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())
    [deployment] = values["dagster-user-deployments"]["deployments"]
    assert _mounts_the_settings(deployment["volumes"], deployment["volumeMounts"],
                                {e["name"]: e["value"] for e in deployment["env"]})
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    assert _mounts_the_settings(launcher["volumes"], launcher["volumeMounts"],
                                dict(v.split("=", 1) for v in launcher["envVars"]))
    instance = yaml.safe_load((ROOT / "deploy/k8s/dagster-instance.yaml").read_text())["run_launcher"]["config"]
    assert _mounts_the_settings(instance["volumes"], instance["volume_mounts"],
                                dict(v.split("=", 1) for v in instance["env_vars"]))


def _launcher(monkeypatch, config: dict):
    """dagster-k8s's K8sRunLauncher from `config` (as the instance's dagster.yaml gives it), without a cluster."""
    import dagster_k8s.launcher
    from dagster_k8s import K8sRunLauncher

    monkeypatch.setattr(dagster_k8s.launcher, "load_kubernetes_config", lambda **kwargs: None)
    processed = __import__("dagster._config", fromlist=["process_config"]).process_config(
        K8sRunLauncher.config_type(), config)
    assert processed.success, processed.errors
    return K8sRunLauncher(**processed.value)


def _helm_launcher_config(values: dict) -> dict:
    """The run launcher's instance config the chart renders from its values (the keys this profile uses)."""
    given = values["runLauncher"]["config"]["k8sRunLauncher"]
    return {"service_account_name": "dagster", "instance_config_map": "dagster-instance",
            "dagster_home": "/opt/dagster/dagster_home", "load_incluster_config": given["loadInclusterConfig"],
            "image_pull_policy": given["imagePullPolicy"], "env_secrets": [s["name"] for s in given["envSecrets"]],
            "env_vars": given["envVars"], "volumes": given["volumes"], "volume_mounts": given["volumeMounts"]}


def _run_and_step_pods(launcher, defs, asset: str, code_location=None):
    """The pod of a run (the K8sRunLauncher's) and of one of its steps (k8s_job_executor's), built as dagster-k8s
    builds them: the run launcher's container context, the code location's (the chart's includeConfigInLaunchedRuns)
    and the step's tags merged."""
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster_k8s.container_context import K8sContainerContext
    from dagster_k8s.job import construct_dagster_k8s_job, get_user_defined_k8s_config

    graph = defs.resolve_asset_graph()
    tags = graph.get(next(k for k in graph.get_all_asset_keys() if k.to_user_string() == asset)).assets_def.op.tags
    run = DagsterRun(job_name="ingest_run_batch", run_id="0" * 36)
    pods = []
    for include_run_tags, step_tags in ((True, None), (False, tags)):
        context = K8sContainerContext.create_for_run(run, launcher, include_run_tags=include_run_tags)
        if code_location is not None:
            context = context.merge(code_location)
        if step_tags is not None:
            context = context.merge(K8sContainerContext(run_k8s_config=get_user_defined_k8s_config(step_tags)))
        job = construct_dagster_k8s_job(context.get_k8s_job_config("orchrm:cuda", launcher),
                                        ["dagster", "api", "execute_step"], f"orchrm-{asset.replace('_', '-')}",
                                        user_defined_k8s_config=context.run_k8s_config)
        pods.append(job.spec.template.spec)
    return pods


def _pod_reads_the_settings(spec) -> bool:
    container = spec.containers[0]
    env = {e.name: e.value for e in container.env}
    volumes = [v for v in spec.volumes if v.name == "orchrm-config"]
    mounts = [m for m in container.volume_mounts if m.name == "orchrm-config"]
    return (len(volumes) == len(mounts) == 1 and volumes[0].config_map.name == "orchrm-config"
            and f"{mounts[0].mount_path}/orchrm.yaml" == env.get("ORCHRM_CONFIG") == SETTINGS_PATH)


@pytest.mark.parametrize("asset", ["runs", "reward_model"])  # a CPU step and a GPU step
def test_every_run_pod_and_step_pod_reads_the_settings_file(k8s_defs, monkeypatch, asset):
    from dagster_k8s.container_context import K8sContainerContext

    instance = yaml.safe_load((ROOT / "deploy/k8s/dagster-instance.yaml").read_text())["run_launcher"]["config"]
    for spec in _run_and_step_pods(_launcher(monkeypatch, instance), k8s_defs, asset):
        assert _pod_reads_the_settings(spec)
    values = yaml.safe_load((ROOT / "deploy/helm/values.yaml").read_text())
    [deployment] = values["dagster-user-deployments"]["deployments"]
    code_location = K8sContainerContext(env=deployment["env"], volumes=deployment["volumes"],
                                        volume_mounts=deployment["volumeMounts"])
    run_pod, step_pod = _run_and_step_pods(_launcher(monkeypatch, _helm_launcher_config(values)), k8s_defs, asset,
                                           code_location)
    assert _pod_reads_the_settings(run_pod) and _pod_reads_the_settings(step_pod)  # mounted once, though given twice
    assert ("nvidia.com/gpu" in (step_pod.containers[0].resources.limits or {})) == (asset == "reward_model")
