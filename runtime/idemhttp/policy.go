package idemhttp

import (
	"errors"
	"fmt"

	"github.com/idemgen/idemgen/runtime/idem"
)

// Check reports the misconfigurations only the running server can see, which would otherwise
// surface when a request arrives: a policy that scopes keys by tenant on a Store without
// Config.Tenant, a nil policy, a policy without an Operation; and UncertainOnLoss on transaction
// claims, which a policy written by hand could ask for (generated ones cannot: lint's
// uncertain-needs-lease). What a policy's values may be is otherwise x-idempotency's rules,
// checked when the policy is generated (idemgen lint reports them).
// Every problem is reported, joined with errors.Join; nil means Serve can run every policy
// given.
//
// Call it once at startup with every policy the Store will serve. Generated code does so in
// NewIdempotentServer and panics on an error, as regexp.MustCompile does: a wrong policy or a
// missing Config.Tenant is a programmer error that no request can fix.
func Check(s *idem.Store, ps ...*Policy) error {
	if s == nil {
		return errors.New("idem: the Store is nil (pass the one idem.NewStore returned)")
	}
	cfg := s.Config()
	var errs []error
	for i, p := range ps {
		if p == nil {
			errs = append(errs, fmt.Errorf("idem: policy %d is nil", i))
			continue
		}
		bad := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("idem: policy of %s: %s", p.name(), fmt.Sprintf(format, args...)))
		}
		if p.Operation == "" {
			bad("Operation is empty (set it to the operationId: it separates the operation's keys and names it in logs)")
		}
		if p.UncertainOnLoss && p.Claim == idem.ClaimTransaction {
			bad("UncertainOnLoss needs lease claims, and Claim is ClaimTransaction: a transaction's claim is not durable until it commits, so nothing would record the provider call after a crash (use idem.ClaimLease, or drop uncertainOnLoss in the spec and regenerate)")
		}
		if p.ScopeTenant && cfg.Tenant == nil {
			bad("the scope includes the tenant, but Config.Tenant is nil. Either tell the store how to find a request's tenant:\n" +
				"\tidem.NewStore(pool, &idem.Config{Tenant: func(ctx context.Context) (string, error) { /* what your auth middleware stored */ }})\n" +
				"or, for an API without tenants, drop tenant from the scope in the spec and regenerate:\n" +
				"\tx-idempotency: {scope: [operation]}")
		}
	}
	return errors.Join(errs...)
}

// name is how errors name the policy: its route and operation id, whichever are set.
func (p *Policy) name() string {
	switch {
	case p.Route != "" && p.Operation != "":
		return p.Route + " (" + p.Operation + ")"
	case p.Route != "":
		return p.Route
	case p.Operation != "":
		return p.Operation
	}
	return "an unnamed operation"
}
