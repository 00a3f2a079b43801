-- One row per run batch: what landed, what was quarantined, what is labeled.
WITH r AS (SELECT batch_id, count(*) AS runs FROM runs GROUP BY ALL),
     q AS (SELECT batch_id, count(*) AS quarantined FROM quarantine GROUP BY ALL),
     l AS (SELECT batch_id, count(*) AS labeled, count(*) FILTER (WHERE is_correct) AS correct FROM labels GROUP BY ALL)
SELECT batch_id, coalesce(r.runs, 0) AS runs, coalesce(q.quarantined, 0) AS quarantined,
       coalesce(l.labeled, 0) AS labeled, coalesce(l.correct, 0) AS correct
FROM r FULL JOIN q USING (batch_id) FULL JOIN l USING (batch_id)
ORDER BY batch_id;
