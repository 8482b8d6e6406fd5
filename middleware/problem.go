package middleware

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/slidelimit/slidelimit/internal/lifecycle"
)

// Problem types (RFC 9457) used in response bodies: those of
// draft-ietf-httpapi-ratelimit-headers-11, Sections 5.1 and 5.2, and the
// one of responses that need no more than their status code.
const (
	problemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
	problemBlank                    = "about:blank"
)

// problem is an RFC 9457 problem details object. ViolatedPolicies is the
// extension member the draft defines for its problem types.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// WriteProblem is the default of WithDeniedHandler. It writes d.Status
// with an application/problem+json body (RFC 9457). For a 429 the body has the
// draft's quota-exceeded type and a "violated-policies" member listing the
// violated policy, as in
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota Exceeded","status":429,
//	 "detail":"Quota of policy \"ip-1s\" (5 requests per 1s) exceeded; retry after 1s.",
//	 "violated-policies":["ip-1s"]}
//
// The detail words the limit in the violated rule's unit (see
// Denial.Cost), such as "(2147483648 bytes per 1d)" for user[bytes].
//
// A 503 (Redis failed and the group fails closed) has the draft's
// temporary-reduced-capacity type, title "Temporary Reduced Capacity" and no
// violated-policies member, because no quota was exceeded; it says nothing
// about the failure itself.
func WriteProblem(w http.ResponseWriter, r *http.Request, d Denial) {
	p := problem{Type: problemBlank, Title: http.StatusText(d.Status), Status: d.Status}
	retry := strconv.FormatInt(lifecycle.CeilSeconds(d.RetryAfter), 10) + "s"
	switch {
	case d.Status == http.StatusTooManyRequests:
		p.Type = problemQuotaExceeded
		p.Title = "Quota Exceeded"
		switch {
		case d.Never:
			p.Detail = "This request alone exceeds the quota of policy " + strconv.Quote(d.Policy) + " (" + quotaText(d) +
				" per " + periodPhrase(d.Window) + "); it can never be admitted."
			p.ViolatedPolicies = []string{d.Policy}
		case d.Policy != "" && d.Window.Concurrent:
			p.Detail = "Quota of policy " + strconv.Quote(d.Policy) + " (" + atATime(d.Window.Limit) +
				") exceeded; retry after " + retry + "."
			p.ViolatedPolicies = []string{d.Policy}
		case d.Policy != "":
			p.Detail = "Quota of policy " + strconv.Quote(d.Policy) + " (" + quotaText(d) + " per " +
				periodPhrase(d.Window) + ") exceeded; retry after " + retry + "."
			p.ViolatedPolicies = []string{d.Policy}
		default:
			p.Detail = "Too many requests; retry after " + retry + "."
		}
	case d.Status == http.StatusServiceUnavailable:
		p.Type = problemTemporaryReducedCapacity
		p.Title = "Temporary Reduced Capacity"
		p.Detail = "The service cannot admit requests at the moment; retry after " + retry + "."
	}
	writeProblem(w, p)
}

// quotaText words the violated window's limit in its unit: "5 requests",
// "2147483648 bytes", "100 units at 5 per request" for a constant cost, or
// "1000 units of cost tokens" for another cost function.
func quotaText(d Denial) string {
	limit := strconv.FormatInt(d.Window.Limit, 10)
	switch {
	case d.Cost == "":
		return limit + " requests"
	case d.Cost == "bytes":
		return limit + " bytes"
	case isDecimal(d.Cost):
		return limit + " units at " + d.Cost + " per request"
	}
	return limit + " units of cost " + d.Cost
}

func writeProblem(w http.ResponseWriter, p problem) {
	body, err := json.Marshal(p)
	if err != nil {
		// Unreachable: the struct holds only strings and ints.
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(p.Status)
	w.Write(append(body, '\n'))
}

// writeInternalError answers a request the middleware cannot decide on; the
// cause goes to the logger, never to the client.
func writeInternalError(w http.ResponseWriter) {
	writeProblem(w, problem{Type: problemBlank, Title: http.StatusText(http.StatusInternalServerError),
		Status: http.StatusInternalServerError})
}

// atATime words the limit of an in-flight window: "1 request at a time",
// "3 requests at a time".
func atATime(n int64) string {
	if n == 1 {
		return "1 request at a time"
	}
	return strconv.FormatInt(n, 10) + " requests at a time"
}
