SELECT count(*) AS problems_in_both_splits
FROM (SELECT problem_id FROM pairs GROUP BY problem_id HAVING count(DISTINCT split) > 1);
