-- One warehouse view over a table's Parquet files (all batches, listed). Rebuilt after every write.
CREATE OR REPLACE VIEW $view AS
SELECT * FROM read_parquet($files, union_by_name = true, hive_partitioning = false);
