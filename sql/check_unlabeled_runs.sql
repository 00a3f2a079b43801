-- Runs of one batch that have a reference answer (their own or their problem's) but no label.
SELECT count(*) AS unlabeled
FROM runs r LEFT JOIN problems p USING (problem_id)
WHERE r.batch_id = $batch_id
  AND coalesce(r.reference_answer, p.answer) IS NOT NULL
  AND r.run_id NOT IN (SELECT run_id FROM labels WHERE batch_id = $batch_id);
