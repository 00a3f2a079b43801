"""Deployment profiles: the same code location on one machine (`local`) or on Kubernetes (`k8s`), switched by
ORCHRM_DEPLOYMENT or the settings file's `deployment.profile`, never by a fork of the code.

- local: every step of a run inside the run's own process (Dagster's in-process executor), the SQLite instance
  under DAGSTER_HOME, local or S3 storage. With Dagster's default multiprocess executor a step runs in a child of
  the run worker, and a kill -9 of the worker left that child running beside the run's retry: work done twice.
- k8s: every step in its own pod (dagster-k8s `k8s_job_executor`); runs launched by the instance's K8sRunLauncher
  into Postgres-backed instance storage (deploy/helm/values.yaml). Steps that hold a model on the accelerator ask
  for a GPU and the GPU node pool; the rest ask for CPU only. Needs the `k8s` extra.
"""

from __future__ import annotations

from assets.partitions import GPU_POOL, POLICY_POOL, WAREHOUSE_POOL
from orchrm_dagster.settings import deployment_profile

GPU_NODE_SELECTOR = {"orchrm.ai/pool": "gpu"}
GPU_TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]

# Pod settings per kind of step, read by dagster-k8s from the `dagster-k8s/config` op tag (ignored locally).
GPU_STEP = {"dagster-k8s/config": {
    "container_config": {"resources": {"requests": {"cpu": "4", "memory": "24Gi"},
                                       "limits": {"nvidia.com/gpu": "1", "memory": "48Gi"}}},
    "pod_spec_config": {"node_selector": GPU_NODE_SELECTOR,
                        "tolerations": GPU_TOLERATIONS},
}}
CPU_STEP = {"dagster-k8s/config": {
    "container_config": {"resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}}},
}}

# A step's pool and its pod are decided together: one that holds the reward model (training, scoring, judging) runs
# in the gpu pool on a GPU node, one that holds the policy (sampling, rounds) in the policy pool on a GPU node; the
# rest in the warehouse pool on CPU. Each asset takes one: `**MODEL_STEP`.
MODEL_STEP = {"pool": GPU_POOL, "op_tags": GPU_STEP}
POLICY_STEP = {"pool": POLICY_POOL, "op_tags": GPU_STEP}
WAREHOUSE_STEP = {"pool": WAREHOUSE_POOL, "op_tags": CPU_STEP}


def profile() -> str:
    """ORCHRM_DEPLOYMENT, else the settings file's `deployment.profile`, else local."""
    return deployment_profile()


def executor():
    """The profile's executor: in-process locally (a run is one process, so killing it stops all of its work)."""
    if profile() == "local":
        import dagster as dg

        return dg.in_process_executor
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError as err:
        raise ImportError("ORCHRM_DEPLOYMENT=k8s needs the k8s extra: pip install -e '.[k8s]'") from err
    return k8s_job_executor
