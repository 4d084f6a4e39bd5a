ALTER TABLE {{.Table}} RESET (fillfactor);
