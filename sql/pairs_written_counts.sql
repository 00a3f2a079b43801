-- Pairs per source and split; the grand-total row (source and split NULL) counts problems with any pair.
SELECT source, split, count(*) AS pairs, count(DISTINCT problem_id) AS problems
FROM read_parquet($path)
GROUP BY GROUPING SETS ((source, split), ());
