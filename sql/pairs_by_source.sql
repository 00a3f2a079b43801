SELECT source, count(*) AS pairs FROM pairs GROUP BY source ORDER BY source;
