SET $setting = $value;
