package idem

// PurgeSQL is the statement one purge batch sends, for the test that checks its plan.
func PurgeSQL(s *Store) string { return s.sql.purge }
