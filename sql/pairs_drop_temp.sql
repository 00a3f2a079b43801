DROP TABLE IF EXISTS temp.$table;
