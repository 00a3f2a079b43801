-- A table with no Parquet yet: a typed, empty view, so queries work before the first batch lands.
CREATE OR REPLACE VIEW $view AS
SELECT $typed_nulls WHERE false;
