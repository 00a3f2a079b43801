-- The optional part of pair_texts.sql: pairs imported from the published format.
UNION ALL
SELECT pair_id, split, source, question, chosen_plan, rejected_plan FROM imported_pairs
