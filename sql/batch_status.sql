-- One row per run batch: what landed, what was quarantined, what is labeled and by what (label_source: a reference
-- or the run's own is_correct), the runs left unlabeled for want of a reference (no reference_answer, no answer in
-- problems, no label of their own is_correct: as unlabeled_runs.sql counts them), and the labeled runs whose plan
-- does not parse (labels written before plan_parses existed count as parsing: unknown). A label row without a
-- verdict (is_correct NULL) is a run that failed for a cause outside its plan's answer: counted as failed_runs.
WITH r AS (SELECT batch_id, count(*) AS runs FROM runs GROUP BY ALL),
     q AS (SELECT batch_id, count(*) AS quarantined FROM quarantine GROUP BY ALL),
     l AS (SELECT batch_id, count(is_correct) AS labeled, count(*) FILTER (WHERE is_correct) AS correct,
                  count(is_correct) FILTER (WHERE label_source = 'reference') AS labeled_by_reference,
                  count(is_correct) FILTER (WHERE label_source = 'run') AS labeled_by_run,
                  count(is_correct) FILTER (WHERE NOT plan_parses) AS unparsed_plans,
                  count(*) FILTER (WHERE is_correct IS NULL) AS failed_runs
           FROM labels GROUP BY ALL),
     u AS (SELECT r.batch_id, count(*) AS unlabeled
           FROM runs r
           ANTI JOIN (SELECT problem_id FROM problems WHERE answer IS NOT NULL) p ON p.problem_id = r.problem_id
           ANTI JOIN labels lb ON lb.run_id = r.run_id AND lb.batch_id = r.batch_id
           WHERE nullif(r.reference_answer, '') IS NULL
           GROUP BY ALL)
SELECT batch_id, coalesce(r.runs, 0) AS runs, coalesce(q.quarantined, 0) AS quarantined,
       coalesce(l.labeled, 0) AS labeled, coalesce(l.correct, 0) AS correct,
       coalesce(l.labeled_by_reference, 0) AS labeled_by_reference, coalesce(l.labeled_by_run, 0) AS labeled_by_run,
       coalesce(u.unlabeled, 0) AS unlabeled, coalesce(l.unparsed_plans, 0) AS unparsed_plans,
       coalesce(l.failed_runs, 0) AS failed_runs
FROM r FULL JOIN q USING (batch_id) FULL JOIN l USING (batch_id) FULL JOIN u USING (batch_id)
ORDER BY batch_id;
