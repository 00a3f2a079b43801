import dagster as dg

# One partition per landed batch file; the landing-zone sensor adds them.
run_batches = dg.DynamicPartitionsDefinition(name="run_batches")

# Steps that write the DuckDB warehouse share this pool (limit 1 in the instance's dagster.yaml).
WAREHOUSE_POOL = "warehouse"

# Orchestration runs: one partition per (benchmark, policy), so a new policy or benchmark adds partitions
# instead of redoing old ones. `orchestration_partitions_sensor` (and the CLI) register the keys.
benchmarks = dg.DynamicPartitionsDefinition(name="benchmarks")
policies = dg.DynamicPartitionsDefinition(name="policies")
orchestration_partitions = dg.MultiPartitionsDefinition({"benchmark": benchmarks, "policy": policies})

# GRPO rounds: one partition per round ("1", "2", ...), added by the loop (sensor or `orchrm loop`).
grpo_rounds = dg.DynamicPartitionsDefinition(name="grpo_rounds")

# Steps that hold the reward model (its training and scoring, the evaluation's judges) share this pool; its limit of 1
# (the instance's default) means one such model at a time.
GPU_POOL = "gpu"

# Steps that hold the orchestrator policy (sampling and executing plans: a round's rollouts; GRPO rounds) share this
# one, limit 1: never two rounds at once. A pool of their own, so a round never queues behind the reward model's
# training or scoring, and the champion's scores of new batches never wait for a round (the loop learns under a
# stream; on one accelerator the reward model and the policy may each hold one model at a time).
POLICY_POOL = "policy"

# Every pool a step names; their limit rows are created before any run claims a slot (assets/runs.py).
POOLS = (WAREHOUSE_POOL, GPU_POOL, POLICY_POOL)


def orchestration_partition_requests(instance, storage, policy_registry) -> list[dg.AddDynamicPartitionsRequest]:
    """The `benchmarks` and `policies` partitions the problems table and the policy registry have and the instance
    does not yet."""
    from orchrm_dagster.orchestration import benchmarks_available

    requests = []
    for partitions, wanted in ((benchmarks, benchmarks_available(storage.storage_root())),
                               (policies, policy_registry.names(storage.storage_root()))):
        existing = set(instance.get_dynamic_partitions(partitions.name))
        missing = [key for key in wanted if key not in existing]
        if missing:
            requests.append(partitions.build_add_request(missing))
    return requests
