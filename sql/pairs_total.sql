-- Every pair reward-model training reads: built and imported.
SELECT (SELECT count(*) FROM pairs) + (SELECT count(*) FROM imported_pairs) AS pairs;
