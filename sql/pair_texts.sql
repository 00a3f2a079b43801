-- What reward-model training reads: each pair with its question and both plan texts.
-- The last line is a placeholder: empty, or pair_texts_imported.sql when an `imported_pairs` relation exists.
SELECT p.pair_id, p.split, p.source, c.question, c.plan AS chosen_plan, r.plan AS rejected_plan
FROM pairs p
JOIN runs c ON c.run_id = p.chosen_run_id
JOIN runs r ON r.run_id = p.rejected_run_id
$imported
