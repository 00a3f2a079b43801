-- Runs left unlabeled for want of a reference, by batch and benchmark: no reference_answer of their own, no answer
-- for their problem in problems, and no label (their benchmark's own is_correct not trusted: labels.trust_run_labels,
-- or the run carries none). batch_status.sql counts the same runs per batch.
SELECT r.batch_id, r.benchmark, count(*) AS unlabeled
FROM runs r
ANTI JOIN (SELECT problem_id FROM problems WHERE answer IS NOT NULL) p ON p.problem_id = r.problem_id
ANTI JOIN labels lb ON lb.run_id = r.run_id AND lb.batch_id = r.batch_id
WHERE nullif(r.reference_answer, '') IS NULL
GROUP BY ALL
ORDER BY batch_id, unlabeled DESC, benchmark;
