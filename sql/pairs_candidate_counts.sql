-- Pairs available to the caps per source (conflicts removed), and conflicting plan pairs (unordered).
SELECT count(*) FILTER (WHERE specialized_over_base AND NOT conflict) AS specialized_over_base,
       count(*) FILTER (WHERE correct_over_incorrect AND NOT conflict) AS correct_over_incorrect,
       count(*) FILTER (WHERE conflict AND chosen_key < rejected_key) AS conflicts
FROM pairs_candidates;
