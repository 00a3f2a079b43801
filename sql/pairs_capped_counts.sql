SELECT count(*) FILTER (WHERE source = 'specialized_over_base') AS specialized_over_base,
       count(*) FILTER (WHERE source = 'correct_over_incorrect') AS correct_over_incorrect
FROM pairs_capped;
