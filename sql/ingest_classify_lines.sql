-- For every staged (valid) line of a batch: keep it, or say why it is a duplicate.
-- Only ids and line numbers are held here, so a batch larger than memory stays cheap.
CREATE TEMP TABLE line_fate AS
WITH staged AS (
    SELECT run_id, line_number, min(line_number) OVER (PARTITION BY run_id) AS first_line
    FROM read_parquet($staged_runs)
),
prior AS (
    SELECT run_id, min(batch_id) AS batch_id FROM $existing_runs GROUP BY run_id
)
SELECT staged.run_id, staged.line_number, staged.first_line, prior.batch_id AS prior_batch,
       staged.line_number = staged.first_line AND prior.batch_id IS NULL AS keep
FROM staged LEFT JOIN prior USING (run_id);
