-- Pairs in the published OrchRM format: one JSON object per line with input, chosen, rejected, source.
-- Line order is unspecified.
COPY (
    SELECT c.question AS input, c.plan AS chosen, r.plan AS rejected, p.source
    FROM read_parquet($pairs) p
    JOIN runs c ON c.run_id = p.chosen_run_id
    JOIN runs r ON r.run_id = p.rejected_run_id
) TO $out (FORMAT json);
