package idem

import "testing"

// The advisory lock id of a key must never change between versions of the runtime: during a
// rolling deploy two versions claim the same keys, and only the same id makes one wait for the
// other. These ids are the ones the first version under the key's lock gave (FNV-1a over the
// table's name and the row's tenant, scope and key, NUL-separated); lockOf, which starts from the
// Store's seed, must give them too.
func TestLockIDIsStable(t *testing.T) {
	for _, tc := range []struct {
		table string
		row   rowID
		want  int64
	}{
		{`"public"."idempotency_keys"`, rowID{"", "createPayment", "k1"}, -4081109523761530596},
		{`"public"."idempotency_keys"`, rowID{"acme", "createPayment", "0f8fad5b-d9cb-469f-a165-70867728950e"}, -1744306698375779858},
		{`"billing"."keys"`, rowID{"t", "", "é-ключ"}, -3393714433354753373},
		{`"public"."idempotency_keys"`, rowID{}, 1010156012101417158},
	} {
		if got := lockFrom(lockSeed(tc.table), tc.row); got != tc.want {
			t.Errorf("lockFrom(lockSeed(%s), %+v) = %d; want %d", tc.table, tc.row, got, tc.want)
		}
		s := &Store{table: tc.table, lockSeed: lockSeed(tc.table)}
		if got := s.lockOf(tc.row); got != tc.want {
			t.Errorf("lockOf(%+v) on %s = %d; want %d", tc.row, tc.table, got, tc.want)
		}
	}
}
