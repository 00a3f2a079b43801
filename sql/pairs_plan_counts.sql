-- Problems seen, and plans that stand on both sides of a source (each would have been paired with itself).
SELECT count(DISTINCT problem_id) AS problems,
       count(*) FILTER (WHERE specialized_run IS NOT NULL AND base_run IS NOT NULL)
       + count(*) FILTER (WHERE correct_run IS NOT NULL AND incorrect_run IS NOT NULL) AS identical_plans_skipped
FROM pairs_plans;
