-- One warehouse view over a table's Parquet files (all batches). Rebuilt after every write.
CREATE OR REPLACE VIEW $view AS
SELECT * FROM read_parquet($glob, union_by_name = true, hive_partitioning = false);
