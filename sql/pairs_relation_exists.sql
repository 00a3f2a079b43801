SELECT count(*) > 0 FROM information_schema.tables WHERE table_name = $name;
