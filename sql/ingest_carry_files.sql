-- The rows a batch holds now of the files ($files) its new ingest could not read, staged as its new lines are
-- (calls with their run's source_file), so the new batch keeps them: a file that fails never costs runs it gave.
COPY (
    SELECT * FROM read_parquet($runs, union_by_name = true) WHERE source_file IN $files
) TO $out_runs (FORMAT parquet, COMPRESSION zstd);
COPY (
    SELECT c.*, r.source_file FROM read_parquet($calls, union_by_name = true) c
    JOIN (SELECT run_id, source_file FROM read_parquet($runs, union_by_name = true) WHERE source_file IN $files) r
    USING (run_id)
) TO $out_calls (FORMAT parquet, COMPRESSION zstd);
COPY (
    SELECT * FROM read_parquet($quarantine, union_by_name = true) WHERE source_file IN $files
) TO $out_quarantine (FORMAT parquet, COMPRESSION zstd);
