package idemwire

import (
	"fmt"
	"strconv"
)

// DefaultPersist is the persist set of an operation that names none: every 2xx, 3xx and 4xx
// answer is stored (never 408, 425 or 429). Callers must not modify it.
var DefaultPersist = []string{"2xx", "3xx", "4xx"}

// NeverStored reports whether status is one no persist set stores: 408, 425 and 429 say "try
// again", so storing them would replay a transient refusal forever.
func NeverStored(status int) bool {
	return status == 408 || status == 425 || status == 429
}

// StatusSet is a persist set: HTTP statuses written as classes ("2xx") or codes ("404"). The
// statuses NeverStored names are never members. The zero value is empty.
type StatusSet struct {
	bits [8]uint64 // bit s-100 for statuses 100..599
}

// ParseStatuses builds a StatusSet of items, each a class 1xx..5xx (lower-case) or a code
// 100..599. A malformed item is left out, and the error names the first one.
func ParseStatuses(items ...string) (StatusSet, error) {
	var s StatusSet
	var bad error
	for _, it := range items {
		if len(it) == 3 && it[0] >= '1' && it[0] <= '5' && it[1:] == "xx" {
			base := int(it[0]-'0') * 100
			for c := base; c < base+100; c++ {
				s.add(c)
			}
			continue
		}
		c, err := strconv.Atoi(it)
		if err != nil || len(it) != 3 || c < 100 || c > 599 {
			if bad == nil {
				bad = fmt.Errorf("%q is neither a status class like 2xx nor a status code 100..599", it)
			}
			continue
		}
		s.add(c)
	}
	return s, bad
}

func (s *StatusSet) add(c int) {
	if NeverStored(c) {
		return
	}
	s.bits[(c-100)/64] |= 1 << ((c - 100) % 64)
}

// Contains reports whether status is in the set.
func (s StatusSet) Contains(status int) bool {
	if status < 100 || status > 599 {
		return false
	}
	return s.bits[(status-100)/64]&(1<<((status-100)%64)) != 0
}

// IsEmpty reports whether the set has no member.
func (s StatusSet) IsEmpty() bool { return s == StatusSet{} }
