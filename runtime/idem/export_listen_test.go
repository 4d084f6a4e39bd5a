package idem

import "time"

// SetListenCheck sets how often s's listener checks that it hears, and how long a check waits
// for its own notification, so a test sees a deaf listener found out quickly.
func SetListenCheck(s *Store, every, within time.Duration) {
	if s.ln != nil {
		s.ln.checkEvery, s.ln.checkWithin = every, within
	}
}

// PreparesByName reports whether s prepares its batched statements by name on its connections:
// false once it found a pooler in front of the database.
func PreparesByName(s *Store) bool { t := s.topo.Load(); return t != nil && !t.pooled }

// ListenerStarted reports whether s's listener runs (a duplicate has waited lately).
func ListenerStarted(s *Store) bool {
	if s.ln == nil {
		return false
	}
	s.ln.mu.Lock()
	defer s.ln.mu.Unlock()
	return s.ln.running
}
