-- For every staged (valid) line of a batch: keep it, or say why it is a duplicate. A line is (source_file,
-- line_number): a batch may hold several files, and the first copy of a run_id, by file name then line, is kept.
-- Only ids and line numbers are held here, so a batch larger than memory stays cheap.
CREATE TEMP TABLE line_fate AS
WITH staged AS (
    SELECT run_id, source_file, line_number,
           min((source_file, line_number)) OVER (PARTITION BY run_id) AS first_copy
    FROM read_parquet($staged_runs, union_by_name = true)
),
prior AS (
    SELECT run_id, min(batch_id) AS batch_id FROM $existing_runs GROUP BY run_id
)
SELECT staged.run_id, staged.source_file, staged.line_number, staged.first_copy[1] AS first_file,
       staged.first_copy[2] AS first_line, prior.batch_id AS prior_batch,
       (staged.source_file, staged.line_number) = staged.first_copy AND prior.batch_id IS NULL AS keep
FROM staged LEFT JOIN prior USING (run_id);
