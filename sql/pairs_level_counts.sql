-- For each place within a problem (1 = a problem's first kept pair), how many problems keep a pair there.
SELECT level,
       count(*) FILTER (WHERE len(specialized_kept) >= level) AS specialized,
       count(*) FILTER (WHERE len(correct_kept) >= level) AS correct
FROM pairs_per_problem, range(1, $max_cap + 1) AS levels(level)
GROUP BY level
ORDER BY level;
