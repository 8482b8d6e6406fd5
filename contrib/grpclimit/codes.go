package grpclimit

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
)

// codeNames are the status code names of the gRPC specification
// (doc/statuscodes.md), as service configs spell them in
// retryableStatusCodes, indexed by code.
var codeNames = [...]string{
	codes.OK:                 "OK",
	codes.Canceled:           "CANCELLED",
	codes.Unknown:            "UNKNOWN",
	codes.InvalidArgument:    "INVALID_ARGUMENT",
	codes.DeadlineExceeded:   "DEADLINE_EXCEEDED",
	codes.NotFound:           "NOT_FOUND",
	codes.AlreadyExists:      "ALREADY_EXISTS",
	codes.PermissionDenied:   "PERMISSION_DENIED",
	codes.ResourceExhausted:  "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION",
	codes.Aborted:            "ABORTED",
	codes.OutOfRange:         "OUT_OF_RANGE",
	codes.Unimplemented:      "UNIMPLEMENTED",
	codes.Internal:           "INTERNAL",
	codes.Unavailable:        "UNAVAILABLE",
	codes.DataLoss:           "DATA_LOSS",
	codes.Unauthenticated:    "UNAUTHENTICATED",
}

// codeOf returns the code a count: item names: a name of the gRPC
// specification ("UNAUTHENTICATED") or of grpc-go's codes.Code.String
// ("Unauthenticated"), exactly so spelled.
func codeOf(item string) (codes.Code, bool) {
	for c, name := range codeNames {
		if item == name || item == codes.Code(c).String() {
			return codes.Code(c), true
		}
	}
	return 0, false
}

// countItem reads the count: items of gRPC: an item is a status
// code name, canonically as the specification spells it.
func countItem(item string) (string, error) {
	if c, ok := codeOf(item); ok {
		return codeNames[c], nil
	}
	if len(item) == 3 && item[0] >= '1' && item[0] <= '5' {
		return "", fmt.Errorf("%s is an HTTP status; gRPC counts by status code name, such as UNAUTHENTICATED or Unauthenticated", item)
	}
	hint := ""
	for c, name := range codeNames {
		if strings.EqualFold(item, name) || strings.EqualFold(item, codes.Code(c).String()) ||
			strings.EqualFold(strings.ReplaceAll(item, "_", ""), strings.ReplaceAll(name, "_", "")) {
			hint = fmt.Sprintf("; did you mean %s?", name)
			break
		}
	}
	return "", fmt.Errorf("unknown gRPC status code %q in count; want a name such as UNAUTHENTICATED or Unauthenticated%s", item, hint)
}

// codeSet is a set of status codes, one bit per code.
type codeSet uint32

// codeSetOf returns the set of the canonical count: items of a group, or 0
// when it has none (every outcome counts).
func codeSetOf(items []string) codeSet {
	var s codeSet
	for _, it := range items {
		if c, ok := codeOf(it); ok {
			s |= 1 << c
		}
	}
	return s
}

// has reports whether c is in s; codes beyond the specification's are in
// no set.
func (s codeSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }
