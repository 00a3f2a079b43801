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
