SELECT run_id, count(*) AS copies, string_agg(DISTINCT batch_id, ', ') AS batches
FROM runs GROUP BY run_id HAVING count(*) > 1 ORDER BY copies DESC, run_id LIMIT 20;
