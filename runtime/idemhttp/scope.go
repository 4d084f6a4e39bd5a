package idemhttp

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ScopePart is one element of a key's scope besides the tenant (operation, header:X, path:p).
type ScopePart struct {
	Name  string // "operation", "header:X-Account", "path:cart_id"
	Value string
}

// scopeString renders tenant and parts into the canonical scope stored in the table.
//
// Every string is written with its length in bytes in front ("4:acme|9:operation=13:createPayment"),
// so no tenant or value, whatever bytes it holds, can make two different scopes render alike.
// Whether the result is text PostgreSQL can hold is the store's concern (idem stores any string
// under an encoding of its own); Serve refuses values that are not text before it claims anyway
// (request-invalid), since the handler would bind them into its own statements.
// The tenant is part of the scope so that keys of different tenants never meet, whatever the
// other parts are. It cannot serve as a distribution key (a hash of the whole scope scatters a
// tenant's keys): the table's tenant column, set from the tenant alone, is that key.
func scopeString(tenant string, parts []ScopePart) string {
	var b strings.Builder
	n := len(tenant) + 4
	for _, p := range parts {
		n += len(p.Name) + len(p.Value) + 10
	}
	b.Grow(n) // one allocation: every request builds its scope
	lp := func(s string) {
		b.WriteString(strconv.Itoa(len(s)))
		b.WriteByte(':')
		b.WriteString(s)
	}
	lp(tenant)
	for _, p := range parts {
		b.WriteByte('|')
		lp(p.Name)
		b.WriteByte('=')
		lp(p.Value)
	}
	return b.String()
}

// notText says what keeps s from being PostgreSQL text, or "" when nothing does: text holds
// neither a NUL byte nor invalid UTF-8. A request with such a value is refused before its claim
// (request-invalid), because the handler would bind the same value into its own statements and
// fail there, after the key was claimed, as a 500.
func notText(s string) string {
	// Most values are ASCII without a NUL: one comparison per byte says so.
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == 0 || c >= utf8.RuneSelf {
			return notTextSlow(s)
		}
	}
	return ""
}

// notTextSlow is notText for a value with a NUL byte or a byte past ASCII.
func notTextSlow(s string) string {
	if i := strings.IndexByte(s, 0); i >= 0 {
		return fmt.Sprintf("a NUL byte (at byte %d)", i+1)
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return fmt.Sprintf("a byte that is not UTF-8 (0x%02x at byte %d)", s[i], i+1)
		}
		i += n
	}
	return ""
}

// valueNotText is notText for a typed parameter value: every string in it, through pointers,
// slices, arrays, maps and exported struct fields (a query parameter may be a list or an object).
func valueNotText(v reflect.Value) string {
	switch v.Kind() {
	case reflect.String:
		return notText(v.String())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return ""
		}
		return valueNotText(v.Elem())
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "" // bytes (a UUID, a []byte): bound as bytes, never as text
		}
		for i := range v.Len() {
			if why := valueNotText(v.Index(i)); why != "" {
				return why
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if why := valueNotText(it.Key()); why != "" {
				return why
			}
			if why := valueNotText(it.Value()); why != "" {
				return why
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				if why := valueNotText(v.Field(i)); why != "" {
					return why
				}
			}
		}
	}
	return ""
}

// partName is how a problem names a policy's scope or fingerprint part: "path:payment_id" is
// the path parameter payment_id.
func partName(name string) string {
	kind, param, ok := strings.Cut(name, ":")
	switch {
	case !ok:
		return name
	case kind == "path" || kind == "query":
		return kind + " parameter " + param
	case kind == "header":
		return "header " + param
	}
	return name
}

func problemRequestInvalid(what, why string) *Problem {
	return newProblem(http.StatusBadRequest, CodeRequestInvalid, fmt.Sprintf(
		"the %s contains %s, which the server cannot store as text, so the request was not processed: send it as UTF-8 text without NUL bytes (%%00 and bytes such as %%FF in a URL decode to these)",
		what, why))
}

// textProblem refuses op's request when a value that goes into its scope or fingerprint (and so,
// most likely, into the handler's own statements) is not text: checked before anything is
// claimed.
func (op *Op[R]) textProblem() *Problem {
	for _, parts := range [][]Part{op.Scope, op.Parts} {
		for _, part := range parts {
			if part.Name == scopeOperation {
				continue
			}
			if why := valueNotText(reflect.ValueOf(part.Value)); why != "" {
				return problemRequestInvalid(partName(part.Name), why)
			}
		}
	}
	return nil
}

// requestTextProblem is textProblem for what Serve sees: the tenant and the scope's values.
func requestTextProblem(tenant string, req *Request) *Problem {
	if why := notText(tenant); why != "" {
		return problemRequestInvalid("tenant (what Config.Tenant returned for this request)", why)
	}
	for _, part := range req.Scope {
		if why := notText(part.Value); why != "" {
			return problemRequestInvalid(partName(part.Name), why)
		}
	}
	return nil
}
