-- The problems that entered the latest evaluation, with the reward-model version it evaluated them with (the
-- champion of their benchmark's domain).
SELECT p.problem_id, e.rm_version, e.evaluation_id
FROM evaluation_problems p
JOIN (SELECT DISTINCT evaluation_id, benchmark, rm_version FROM evaluation) e USING (evaluation_id, benchmark)
WHERE p.evaluation_id = (SELECT max(evaluation_id) FROM evaluation_problems);
