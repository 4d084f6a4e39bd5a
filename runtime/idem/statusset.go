package idem

import "github.com/idemgen/idemgen/runtime/idemwire"

// StatusSet is a set of HTTP statuses written as classes ("2xx") or codes ("404"): a persist
// set, as runtime/idemwire defines it. 408, 425 and 429 are never members: those answers say
// "try again", so storing them would replay a transient refusal forever. The zero value is
// empty; Serve treats an empty Persist as the default 2xx, 3xx, 4xx.
type StatusSet = idemwire.StatusSet

// Statuses builds a StatusSet; it panics on a malformed item (generated code is validated).
func Statuses(items ...string) StatusSet {
	s, err := idemwire.ParseStatuses(items...)
	if err != nil {
		panic("idem.Statuses: " + err.Error())
	}
	return s
}
