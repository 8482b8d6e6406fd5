package lifecycle

import "github.com/slidelimit/slidelimit/rules"

// Subject prefixes. Every subject starts with one, so that a user id can
// never be counted together with an IP address, or a header value with
// either, even when a user rule falls back to the client IP.
const (
	subjectIP     = "ip:"
	subjectPeer   = "peer:" // a peer that is not an IP address (a Unix socket)
	subjectUser   = "user:"
	subjectHeader = "header:"
	subjectParam  = "param:"
	subjectKey    = "key:"
	subjectGlobal = "global"
)

// SubjectOf is the one mapping from a rule kind and value to a subject,
// for every transport. For rules.IP, v must already be canonical
// (CanonicalizeIP). It returns "" when v is empty and the kind needs a
// value: the request is then counted by client IP.
func SubjectOf(kind rules.Kind, v string) string {
	if kind == rules.Global {
		return subjectGlobal
	}
	if v == "" {
		return ""
	}
	switch kind {
	case rules.IP:
		return subjectIP + v
	case rules.User:
		return subjectUser + v
	case rules.Header:
		return subjectHeader + v
	case rules.Param:
		return subjectParam + v
	case rules.Key:
		return subjectKey + v
	}
	return ""
}

// SubjectFor is the one mapping from a rule of kind to its subject, for
// a request by user (counted by IP when byIP) whose value for the rule
// (a header value, path value or key) is v. It returns "" when the request
// is counted by its client address instead.
func SubjectFor(kind rules.Kind, user string, byIP bool, v string) string {
	switch kind {
	case rules.IP:
		return ""
	case rules.User:
		if byIP {
			return ""
		}
		return SubjectOf(rules.User, user)
	}
	return SubjectOf(kind, v)
}
