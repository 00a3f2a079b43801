import dagster as dg

# One partition per landed batch file; the landing-zone sensor adds them.
run_batches = dg.DynamicPartitionsDefinition(name="run_batches")

# Steps that write the DuckDB warehouse share this pool (limit 1 in the instance's dagster.yaml).
WAREHOUSE_POOL = "warehouse"
