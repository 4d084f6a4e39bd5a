package idem

// DisableRenewal stops s from renewing leases, so a test can let a lease run out under a live
// handler (the fencing test).
func DisableRenewal(s *Store) { s.noRenew = true }
