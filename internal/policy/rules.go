package policy

// Severity of a diagnostic.
type Severity string

const (
	SeverityError   Severity = "error"
	SeverityWarning Severity = "warning"
)

// Rule describes one check: its stable id (used in diagnostics, lint output and SARIF), its
// severity and a one-line summary.
type Rule struct {
	ID       string
	Severity Severity
	Summary  string
}

// Rule ids. Every id has a negative golden case under internal/spec/testdata/<id>/; a test fails
// when one is missing, so a new rule cannot ship without a pinned message.
const (
	RuleTypeInvalid             = "type-invalid"
	RuleUnknownField            = "unknown-field"
	RuleRootInvalid             = "root-invalid"
	RuleDurationInvalid         = "duration-invalid"
	RuleStorageInvalid          = "storage-invalid"
	RuleClaimInvalid            = "claim-invalid"
	RuleWaitExceedsLease        = "wait-exceeds-lease"
	RuleMismatchStatus          = "mismatch-status-invalid"
	RulePersistInvalid          = "persist-invalid"
	RulePersistNeverStored      = "persist-never-stored"
	RuleScopeInvalid            = "scope-invalid"
	RuleScopeParamMissing       = "scope-param-missing"
	RuleKeyConflict             = "key-conflict"
	RuleKeyInvalid              = "key-invalid"
	RuleKeyParamMissing         = "key-param-missing"
	RuleKeyMaxLength            = "key-max-length"
	RuleKeyPatternInvalid       = "key-pattern-invalid"
	RuleKeyHeaderUndeclared     = "key-header-undeclared"
	RuleFingerprintPointer      = "fingerprint-pointer-invalid"
	RuleFingerprintParamMissing = "fingerprint-param-missing"
	RuleFingerprintParamDenied  = "fingerprint-param-forbidden"
	RuleMarkerNeedsPrint        = "marker-needs-fingerprint"
	RuleReplayImpossible        = "replay-impossible"
	RuleReplayHeaderInvalid     = "replay-header-invalid"
	RuleReplayHeaderDenied      = "replay-header-forbidden"
	RuleSafeMethod              = "safe-method"
	RulePostWithout             = "post-without-idempotency"
	RuleTTLShorterThanLease     = "ttl-shorter-than-lease"
	RuleKeyHeaderUnused         = "key-header-unused"
	RuleResponseUnbounded       = "response-unbounded"
	RuleConflictStatusShared    = "conflict-status-shared"
	RuleAcceptedWithoutLocation = "accepted-without-location"
	RuleHeaderNotReplayed       = "response-header-not-replayed"
	RuleErrorNotProblem         = "error-response-not-problem"
	RuleRefusalsUndocumented    = "refusals-undocumented"
	RuleAcknowledgementInvalid  = "acknowledgement-invalid"
	RuleAcknowledgementStale    = "acknowledgement-stale"
	RuleKeyParamMismatch        = "key-param-mismatch"
	RuleFingerprintVolatile     = "fingerprint-volatile-header"
	RuleRendererInvalid         = "renderer-invalid"
	RuleUncertainNeedsLease     = "uncertain-needs-lease"
	RuleDeliveryInvalid         = "delivery-invalid"
	RuleDeliveryTTLShort        = "delivery-ttl-short"
)

var rules = []Rule{
	{RuleTypeInvalid, SeverityError, "an x-idempotency value has the wrong type"},
	{RuleUnknownField, SeverityError, "x-idempotency has a field idemgen does not know"},
	{RuleRootInvalid, SeverityError, "the document-level x-idempotency is not a mapping of defaults"},
	{RuleDurationInvalid, SeverityError, "ttl, lease, wait or timeout is not a valid duration"},
	{RuleStorageInvalid, SeverityError, "storage is not response, reference or marker"},
	{RuleClaimInvalid, SeverityError, "claim is not lease or transaction"},
	{RuleWaitExceedsLease, SeverityError, "wait is longer than the lease"},
	{RuleMismatchStatus, SeverityError, "mismatchStatus is not 422, 409 or 400"},
	{RulePersistInvalid, SeverityError, "a persist item is not a status class (2xx) or a status code"},
	{RulePersistNeverStored, SeverityError, "persist lists 408, 425 or 429, which are never stored"},
	{RuleScopeInvalid, SeverityError, "a scope item is not tenant, operation, header:<Name> or path:<param>"},
	{RuleScopeParamMissing, SeverityError, "a scope item names a parameter the operation does not declare"},
	{RuleKeyConflict, SeverityError, "key has both header and from"},
	{RuleKeyInvalid, SeverityError, "key.header or key.from is malformed"},
	{RuleKeyParamMissing, SeverityError, "key.from names a path parameter the operation does not declare"},
	{RuleKeyMaxLength, SeverityError, "key.maxLength is outside 1..255"},
	{RuleKeyPatternInvalid, SeverityError, "key.pattern is not a valid RE2 regular expression"},
	{RuleKeyHeaderUndeclared, SeverityError, "the key header is not declared as a header parameter"},
	{RuleFingerprintPointer, SeverityError, "a fingerprint.exclude entry is not an RFC 6901 JSON pointer, header:<Name> or query:<name>"},
	{RuleFingerprintParamMissing, SeverityError, "a fingerprint.exclude entry names a header or query parameter the operation does not declare"},
	{RuleFingerprintParamDenied, SeverityError, "a fingerprint.exclude entry names a path parameter or the key header"},
	{RuleMarkerNeedsPrint, SeverityError, "storage marker with the fingerprint turned off"},
	{RuleReplayImpossible, SeverityError, "storage reference or marker on an operation with no success response to replay"},
	{RuleReplayHeaderInvalid, SeverityError, "a replayHeaders entry is not a valid header name"},
	{RuleReplayHeaderDenied, SeverityError, "replayHeaders lists a hop-by-hop, Set-Cookie or Authorization header"},
	{RuleSafeMethod, SeverityWarning, "x-idempotency on GET, HEAD or OPTIONS, which are already safe"},
	{RuleResponseUnbounded, SeverityWarning, "storage response on an operation whose success body has no size bound"},
	{RulePostWithout, SeverityWarning, "a POST operation without x-idempotency"},
	{RuleTTLShorterThanLease, SeverityWarning, "ttl is shorter than the lease"},
	{RuleKeyHeaderUnused, SeverityWarning, "an idempotency-key-like header is declared but not used as the key"},
	{RuleConflictStatusShared, SeverityWarning, "an idempotent operation declares a 409 of its own, which idemgen's in-progress answer shares"},
	{RuleAcceptedWithoutLocation, SeverityWarning, "an idempotent operation answers 202 without declaring a Location header for its status resource"},
	{RuleHeaderNotReplayed, SeverityWarning, "a stored response declares a header replays never carry (Set-Cookie, Authorization, a hop-by-hop header)"},
	{RuleErrorNotProblem, SeverityWarning, "an idempotent operation declares a non-problem body for a status the runtime also answers with application/problem+json"},
	{RuleRefusalsUndocumented, SeverityWarning, "with renderer: custom, an idempotent operation declares no response on a status its refusals take"},
	{RuleAcknowledgementInvalid, SeverityError, "a lint acknowledgement names no rule, an unknown rule or an error, or gives no reason"},
	{RuleKeyParamMismatch, SeverityError, "x-idempotency.key's maxLength or pattern disagrees with the key header parameter's schema"},
	{RuleFingerprintVolatile, SeverityWarning, "fingerprint.include puts a credential, signature or correlation header back into the fingerprint"},
	{RuleRendererInvalid, SeverityError, "renderer is not problem or custom"},
	{RuleUncertainNeedsLease, SeverityError, "uncertainOnLoss with claim: transaction, whose claim is not durable until the commit"},
	{RuleDeliveryInvalid, SeverityError, "a webhook receiver's delivery names no or an unknown signature scheme, a malformed delivery id source, or also sets key"},
	{RuleDeliveryTTLShort, SeverityError, "a webhook receiver's ttl is shorter than its sender's retry window"},
	{RuleAcknowledgementStale, SeverityWarning, "a lint acknowledgement accepts no finding: its operation or its warning is gone"},
}

// Rules returns every rule, in a stable order.
func Rules() []Rule {
	out := make([]Rule, len(rules))
	copy(out, rules)
	return out
}

// RuleSeverity is the severity of rule id; an id not in the table is a bug of the caller.
func RuleSeverity(id string) Severity {
	for _, r := range rules {
		if r.ID == id {
			return r.Severity
		}
	}
	panic("policy: unknown rule " + id)
}
