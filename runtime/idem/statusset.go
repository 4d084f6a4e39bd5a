package idem

import (
	"fmt"
	"strconv"
)

// StatusSet is a set of HTTP statuses written as classes ("2xx") or codes ("404").
// 408, 425 and 429 are never members: those answers say "try again", so storing them would
// replay a transient refusal forever. The zero value is empty; Serve treats an empty Persist as
// the default 2xx, 3xx, 4xx.
type StatusSet struct {
	bits [8]uint64 // bit s-100 for statuses 100..599
}

// Statuses builds a StatusSet; it panics on a malformed item (generated code is validated).
func Statuses(items ...string) StatusSet {
	var s StatusSet
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
			panic(fmt.Sprintf("idem.Statuses: %q is neither a status class like 2xx nor a status code 100..599", it))
		}
		s.add(c)
	}
	return s
}

func (s *StatusSet) add(c int) {
	if c == 408 || c == 425 || c == 429 {
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
