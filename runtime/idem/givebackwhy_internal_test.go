package idem

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestGiveBackWhy: a cancellation is the caller's only when the caller's context ended; a
// handler's own call that timed out is the handler's error, with its text, so the history of a
// key lost to a provider's timeout does not blame the client.
func TestGiveBackWhy(t *testing.T) {
	bankTimeout := fmt.Errorf("bank: Post \"http://bank/transfers\": %w", context.DeadlineExceeded)
	for _, c := range []struct {
		err        error
		callerGone bool
		want       string
	}{
		{context.Canceled, true, "cancelled: the caller went away"},
		{bankTimeout, true, "cancelled: the caller went away"},
		{bankTimeout, false, "handler error: bank: Post"},
		{errors.New("declined"), false, "handler error: declined"},
		{nil, false, "panic: the handler panicked"},
	} {
		if got := giveBackWhy(EventReleased, c.err, c.callerGone); !strings.HasPrefix(got, c.want) {
			t.Errorf("giveBackWhy(%v, callerGone %v) = %q; want it to start %q", c.err, c.callerGone, got, c.want)
		}
	}
}
