package admin

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/role"
	"github.com/slidelimit/slidelimit/rules"
)

var errorsAs = errors.As

var (
	errBadRef     = errors.New("admin: ref is neither a stored hash (#...) nor a fingerprint (~...)")
	errUnknownRef = errors.New("admin: no subject of that limiter and route denied in the last hour has that ref")
)

// Denied is one entry of GET /api/top.
type Denied struct {
	Scope string `json:"scope"`
	Rule  string `json:"limiter"`
	// Subject is the value the rule counts: a user id, a canonical IP
	// address, a header, path or key value; "" for a global rule. For
	// a subject of a masked kind it is the subject's fingerprint.
	Subject string `json:"subject"`
	Denied  int64  `json:"denied"`
	// ByIP marks a subject counted by client address by a rule of
	// another kind (a user rule's anonymous callers).
	ByIP bool `json:"by_ip,omitempty"`
	// Hashed marks a subject stored hashed whose value no process of
	// this handler saw lately: Subject is then the stored hash.
	Hashed bool `json:"hashed,omitempty"`
	// Truncated marks a value longer than 128 bytes: Subject is its
	// first bytes and "…".
	Truncated bool `json:"truncated,omitempty"`
	// Masked marks a subject of a masked kind (Config.Masked): Subject is
	// its fingerprint, "~" and 12 characters.
	Masked bool `json:"masked,omitempty"`
	// Ref, set when Subject is not the whole value, names the subject
	// for POST /api/reset: a stored hash, or a masked subject's
	// fingerprint.
	Ref string `json:"ref,omitempty"`
}

// TopAnswer is the answer of GET /api/top.
type TopAnswer struct {
	Since string   `json:"since"`
	Top   []Denied `json:"top"`
}

// since parses a view name.
func since(s string) (time.Duration, bool) {
	if !slices.Contains(Views, s) {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}

func (h *handler) top(w http.ResponseWriter, r *http.Request) {
	view := r.URL.Query().Get("since")
	if view == "" {
		view = "1h"
	}
	d, ok := since(view)
	if !ok {
		problem(w, http.StatusBadRequest, "since must be 1m, 5m or 1h")
		return
	}
	top, err := h.topOf(r.Context(), d)
	if err != nil {
		h.fail(w, r, "top", err)
		return
	}
	writeJSON(w, TopAnswer{Since: view, Top: top})
}

// topOf reads the TopN most denied of the last d.
func (h *handler) topOf(ctx context.Context, d time.Duration) ([]Denied, error) {
	top, err := h.src.TopDenied(ctx, d, TopN)
	if err != nil {
		return nil, err
	}
	out := make([]Denied, 0, len(top))
	for _, t := range top {
		out = append(out, h.denied(t).Denied)
	}
	return out, nil
}

// ruleKind is the kind of a rule ID.
func ruleKind(id string) rules.Kind {
	if i := strings.IndexAny(id, "(["); i >= 0 {
		id = id[:i]
	}
	return rules.Kind(id)
}

// Window is one window of a subject's usage. Times are in seconds.
type Window struct {
	Limit int64 `json:"limit"`
	// Period is the window's length; 0 for an in-flight window and a
	// calendar window.
	Period   float64 `json:"period"`
	InFlight bool    `json:"in_flight,omitempty"`
	// Calendar is a calendar window's period: "day", "week" or "month".
	Calendar  string  `json:"calendar,omitempty"`
	Used      int64   `json:"used"`
	Remaining int64   `json:"remaining"`
	Reset     float64 `json:"reset"`
}

// Usage is a subject's windows under one rule of one route.
type Usage struct {
	Scope string `json:"scope"`
	Rule  string `json:"limiter"`
	// Subject is the subject asked for, or its fingerprint (Masked) under
	// a rule whose subjects are masked.
	Subject string `json:"subject"`
	ByIP    bool   `json:"by_ip,omitempty"`
	Masked  bool   `json:"masked,omitempty"`
	Allowed bool   `json:"allowed"`
	// Blocked is, for a blocked subject, the time in seconds until it may
	// be admitted again (the block's time left, or longer when a window is
	// still full after it); 0 when not blocked.
	Blocked float64  `json:"blocked"`
	Windows []Window `json:"windows"`
}

// SubjectAnswer is the answer of GET /api/subject.
type SubjectAnswer struct {
	Subject string  `json:"subject,omitempty"`
	IP      string  `json:"ip,omitempty"`
	Usage   []Usage `json:"usage"`
}

func (h *handler) subject(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	s, ip := q.Get("subject"), q.Get("ip")
	if (s == "") == (ip == "") {
		problem(w, http.StatusBadRequest, "give subject or ip, one of them")
		return
	}
	u, err := h.usage(r.Context(), s, ip)
	if err != nil {
		h.fail(w, r, "subject", err)
		return
	}
	writeJSON(w, SubjectAnswer{Subject: s, IP: ip, Usage: u})
}

// usage peeks at subject (or what was counted by address ip) under every
// rule of every route but global ones, which count no one in
// particular.
func (h *handler) usage(ctx context.Context, subject, ip string) ([]Usage, error) {
	out := []Usage{}
	for _, rt := range h.src.Routes() {
		for _, id := range rt.Rules {
			kind := ruleKind(id)
			if kind == rules.Global {
				continue
			}
			var d engine.Decision
			var err error
			if ip != "" {
				d, err = h.src.PeekByIP(ctx, rt.Scope, id, ip)
			} else {
				d, err = h.src.Peek(ctx, rt.Scope, id, subject)
			}
			var bad *BadInputError
			if errors.As(err, &bad) {
				continue // not a subject of this rule (an ip rule and a user id)
			}
			if err != nil {
				return nil, err
			}
			u := Usage{Scope: rt.Scope, Rule: id, Subject: subject + ip, ByIP: ip != "" && kind != rules.IP,
				Allowed: d.Allowed, Windows: windows(d)}
			if shown := h.shownValue(id, u.Subject, ip != ""); shown != u.Subject {
				u.Subject, u.Masked = shown, true
			}
			if d.Blocked {
				u.Blocked = d.RetryAfter.Seconds()
			}
			out = append(out, u)
		}
	}
	return out, nil
}

func windows(d engine.Decision) []Window {
	out := make([]Window, 0, len(d.Windows))
	for _, ws := range d.Windows {
		w := Window{Limit: ws.Window.Limit, InFlight: ws.Window.Concurrent, Calendar: string(ws.Window.Calendar),
			Used: ws.Used, Remaining: ws.Remaining, Reset: ws.Reset.Seconds()}
		if !ws.Window.Concurrent {
			w.Period = ws.Window.Period.Seconds()
		}
		out = append(out, w)
	}
	return out
}

// Block is an active block.
type Block struct {
	Scope string `json:"scope"`
	Rule  string `json:"limiter"`
	// Subject, ByIP, Hashed, Truncated, Masked and Ref are as in Denied.
	Subject   string `json:"subject"`
	ByIP      bool   `json:"by_ip,omitempty"`
	Hashed    bool   `json:"hashed,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Masked    bool   `json:"masked,omitempty"`
	Ref       string `json:"ref,omitempty"`
	// Left is the time in seconds until the subject may be admitted
	// again: the block's time left, or longer when a window is still full
	// after it.
	Left float64 `json:"left"`
	// Learned marks a block a throttle learned from its upstream's
	// answer (LearnedBlock): Scope is the throttle, Left the block's time
	// left, and Subject the subject's fingerprint (Masked, whatever
	// Config.Masked says), or "" for a global rule. Lifting it by its
	// Ref lifts it in every process.
	Learned bool `json:"learned,omitempty"`
}

// BlocksAnswer is the answer of GET /api/blocks.
type BlocksAnswer struct {
	Blocks []Block `json:"blocks"`
}

// blockCandidates is how many of the last hour's most denied subjects are
// looked at for blocks: a blocked subject that keeps knocking is denied,
// so it is among them; one blocked that stays away is not listed.
const blockCandidates = 200

func (h *handler) blocks(w http.ResponseWriter, r *http.Request) {
	b, err := h.activeBlocks(r.Context())
	if err != nil {
		h.fail(w, r, "blocks", err)
		return
	}
	writeJSON(w, BlocksAnswer{Blocks: b})
}

// activeBlocks peeks at the last hour's most denied subjects, a few at a
// time, and returns the blocked ones, longest time left first.
func (h *handler) activeBlocks(ctx context.Context) ([]Block, error) {
	top, err := h.src.TopDenied(ctx, time.Hour, blockCandidates)
	if err != nil {
		return nil, err
	}
	var (
		mu    sync.Mutex
		out   = []Block{}
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 8)
	)
	for _, t := range top {
		d := h.denied(t)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			// By the stored subject: the very key, whatever its value
			// (hashed, long or masked).
			dec, err := h.src.PeekStored(ctx, d.Scope, d.Rule, d.stored, d.hashed)
			mu.Lock()
			defer mu.Unlock()
			var bad *BadInputError
			switch {
			case errors.As(err, &bad): // a route gone since (an override removed)
			case err != nil:
				first = cmpOr(first, err)
			case dec.Blocked:
				out = append(out, Block{Scope: d.Scope, Rule: d.Rule, Subject: d.Subject, ByIP: d.ByIP,
					Hashed: d.Hashed, Truncated: d.Truncated, Masked: d.Masked, Ref: d.Ref, Left: dec.RetryAfter.Seconds()})
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return nil, first
	}
	if ls, ok := h.src.(LearnedSource); ok {
		lbs, err := ls.LearnedBlocks(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, learnedRows(lbs)...)
	}
	slices.SortFunc(out, func(a, b Block) int {
		switch {
		case a.Left > b.Left:
			return -1
		case a.Left < b.Left:
			return 1
		}
		return strings.Compare(a.Scope+a.Rule+a.Subject, b.Scope+b.Rule+b.Subject)
	})
	return out, nil
}

// learnedRows lists learned blocks as the page does: one row per rule
// and subject, the longest block of a subject when several lanes have it
// (lifting it lifts them all). A global rule's subject, which every
// call has, is listed only for a block of no other subject.
func learnedRows(lbs []LearnedBlock) []Block {
	var out []Block
	at := map[[3]string]int{}
	for _, b := range lbs {
		var rows []LearnedSubject
		for _, s := range b.Subjects {
			if ruleKind(s.Rule) != rules.Global {
				rows = append(rows, s)
			}
		}
		if len(rows) == 0 {
			rows = b.Subjects
		}
		for _, s := range rows {
			blk := Block{Scope: b.Throttle, Rule: s.Rule, Left: b.Left, Learned: true}
			if ruleKind(s.Rule) != rules.Global {
				blk.Subject, blk.Masked, blk.Ref = s.Fingerprint, true, s.Fingerprint
			}
			k := [3]string{blk.Scope, blk.Rule, blk.Subject}
			if i, ok := at[k]; ok {
				out[i].Left = max(out[i].Left, blk.Left)
				continue
			}
			at[k] = len(out)
			out = append(out, blk)
		}
	}
	return out
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// ResetRequest is the body of POST /api/reset: a form
// (application/x-www-form-urlencoded, or the same fields in the query) or
// a JSON object.
type ResetRequest struct {
	Scope string `json:"scope"`
	Rule  string `json:"limiter"`
	// Subject is the rule's value; IP instead resets what the rule
	// counted by client address; Ref instead names a subject by the ref
	// of an entry of /api/top or /api/blocks (a stored hash, or a masked
	// subject's fingerprint).
	Subject string `json:"subject,omitempty"`
	IP      string `json:"ip,omitempty"`
	Ref     string `json:"ref,omitempty"`
}

// ResetAnswer is the answer of POST /api/reset.
type ResetAnswer struct {
	ResetRequest
	Reset bool `json:"reset"`
}

func (h *handler) reset(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	fromPage := false
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
			problem(w, http.StatusBadRequest, "the body is not a JSON object with scope, limiter and subject or ip")
			return
		}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, 1<<16)
		if err := r.ParseForm(); err != nil {
			problem(w, http.StatusBadRequest, "the body is not a form")
			return
		}
		// The body's fields, or the query's (r.Form holds both, the body's
		// first).
		req = ResetRequest{Scope: r.Form.Get("scope"), Rule: r.Form.Get("limiter"),
			Subject: r.Form.Get("subject"), IP: r.Form.Get("ip"), Ref: r.Form.Get("ref")}
		fromPage = r.PostForm.Get("page") != ""
	}
	given := 0
	for _, s := range []string{req.Subject, req.IP, req.Ref} {
		if s != "" {
			given++
		}
	}
	if req.Scope == "" || req.Rule == "" || given > 1 {
		problem(w, http.StatusBadRequest, "give scope, limiter and one of subject, ip or ref")
		return
	}
	var err error
	switch {
	case req.Ref != "":
		// A fingerprint may name a throttle's learned block, which the
		// denial tallies need not know.
		lifted := false
		if ls, ok := h.src.(LearnedSource); ok && strings.HasPrefix(req.Ref, fingerprintPrefix) {
			lifted, err = ls.LiftLearned(r.Context(), req.Scope, req.Rule, req.Ref)
		}
		if err != nil {
			break
		}
		var stored string
		var hashed bool
		if stored, hashed, err = h.resolve(r.Context(), req.Scope, req.Rule, req.Ref); err == nil {
			err = h.src.ResetStored(r.Context(), req.Scope, req.Rule, stored, hashed)
		} else if lifted && errors.Is(err, errUnknownRef) {
			err = nil
		}
	case req.IP != "":
		err = h.src.ResetByIP(r.Context(), req.Scope, req.Rule, req.IP)
	default:
		err = h.src.Reset(r.Context(), req.Scope, req.Rule, req.Subject)
	}
	if err != nil {
		h.fail(w, r, "reset", err)
		return
	}
	// A masked subject given by value is logged and answered by its
	// fingerprint.
	req.Subject = h.shownValue(req.Rule, req.Subject, false)
	req.IP = h.shownValue(req.Rule, req.IP, true)
	id, _ := role.FromContext(r.Context())
	h.log.Info("admin: reset", "by", id.User, "roles", id.Roles, "scope", req.Scope, "limiter", req.Rule,
		"subject", req.Subject, "ip", req.IP, "ref", req.Ref, "remote", r.RemoteAddr)
	if fromPage {
		// Back to the page, at the prefix's root whatever it is: a relative
		// Location, resolved by the browser against the request's own URL
		// (http.Redirect would resolve it against the stripped path).
		w.Header().Set("Location", "../")
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	writeJSON(w, ResetAnswer{ResetRequest: req, Reset: true})
}
