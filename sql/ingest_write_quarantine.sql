-- Rejected lines plus valid lines whose run_id was already taken (earlier in the file, by another file of the
-- batch, or by another batch).
COPY (
    WITH fate AS (
        SELECT *, source_file = first_file AND line_number = first_line AS first_copy FROM line_fate WHERE NOT keep
    )
    SELECT * FROM (
        SELECT * FROM read_parquet($staged_quarantine, union_by_name = true)
        UNION ALL
        SELECT r.batch_id, r.source_file, r.line_number, r.run_id, 'run_id' AS field,
               CASE WHEN NOT f.first_copy AND f.first_file = r.source_file THEN $duplicate_in_file
                    ELSE $already_ingested END AS kind,
               r.source_file || ':' || r.line_number || ': ' || CASE
                    WHEN NOT f.first_copy AND f.first_file = r.source_file
                    THEN 'duplicate run_id ' || r.run_id || ': first seen on line ' || f.first_line || ' of this file'
                    WHEN f.prior_batch IS NOT NULL
                    THEN 'run_id ' || r.run_id || ' was already ingested in batch ' || f.prior_batch || '; this copy is not counted twice'
                    ELSE 'run_id ' || r.run_id || ' was already ingested from ' || f.first_file || ':' || f.first_line
                         || ' in this batch; this copy is not counted twice'
               END AS reason,
               left(to_json(r)::VARCHAR, $max_raw_chars) AS raw,
               length(to_json(r)::VARCHAR) > $max_raw_chars AS raw_truncated
        FROM read_parquet($staged_runs, union_by_name = true) r
        JOIN fate f USING (source_file, line_number)
    ) ORDER BY source_file, line_number
) TO $out (FORMAT parquet, COMPRESSION zstd);
