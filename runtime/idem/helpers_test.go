package idem_test

import (
	"github.com/idemgen/idemgen/runtime/internal/storetest"
)

// The setup shared with the other runtime package's tests (runtime/internal/storetest).
type (
	env          = storetest.Env
	lockedBuffer = storetest.LockedBuffer
)

var (
	newEnv         = storetest.NewEnv
	insertPayment  = storetest.InsertPayment
	policy         = storetest.Policy
	request        = storetest.Request
	written        = storetest.Written
	kindName       = storetest.KindName
	newDebugLogger = storetest.NewDebugLogger
)
