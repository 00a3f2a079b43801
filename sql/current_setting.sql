SELECT current_setting($setting);
