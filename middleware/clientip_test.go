package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/slidelimit/slidelimit/middleware"
	"github.com/slidelimit/slidelimit/rules"
)

func TestCanonicalizeIP(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		bits int
		want string
	}{
		{"192.0.2.7", 64, "192.0.2.7"},
		{"::ffff:192.0.2.7", 64, "192.0.2.7"},
		{"2001:db8:1:2:3:4:5:6", 64, "2001:db8:1:2::/64"},
		{"2001:db8:1:2:3:4:5:6", 48, "2001:db8:1::/48"},
		{"2001:db8:1:2:3:4:5:6", 128, "2001:db8:1:2:3:4:5:6"},
		{"2001:db8:1:2:3:4:5:6", 0, "2001:db8:1:2:3:4:5:6"},
		{"fe80::1%eth0", 64, "fe80::/64"},
		{"fe80::1%eth0", 128, "fe80::1"},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			if got := middleware.CanonicalizeIP(netip.MustParseAddr(tt.addr), tt.bits); got != tt.want {
				t.Errorf("CanonicalizeIP(%s, %d) = %q, want %q", tt.addr, tt.bits, got, tt.want)
			}
		})
	}
	if got := middleware.CanonicalizeIP(netip.Addr{}, 64); got != "" {
		t.Errorf("CanonicalizeIP(zero) = %q, want empty", got)
	}
}

// TestClientIP checks which address an ip rule counts, for direct
// clients, spoofing attempts and proxy chains.
func TestClientIP(t *testing.T) {
	t.Parallel()
	trusted := middleware.WithTrustedProxies("10.0.0.0/8", "2001:db8:ffff::1")
	fwd := middleware.WithProxyHeader("Forwarded")
	tests := []struct {
		name   string
		opts   []middleware.Option
		remote string
		header http.Header
		want   string
	}{
		{"direct IPv4", nil, "203.0.113.9:1234", nil, "ip:203.0.113.9"},
		{"spoofed XFF without trusted proxies", nil, "203.0.113.9:1234",
			http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "ip:203.0.113.9"},
		{"spoofed Forwarded without trusted proxies", nil, "203.0.113.9:1234",
			http.Header{"Forwarded": {"for=1.1.1.1"}}, "ip:203.0.113.9"},
		{"spoofed XFF from untrusted peer", []middleware.Option{trusted}, "198.51.100.7:1234",
			http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "ip:198.51.100.7"},
		{"one trusted proxy", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}}, "ip:203.0.113.5"},
		{"chain of two trusted proxies", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5, 10.0.0.1"}}, "ip:203.0.113.5"},
		{"chain with client-sent prefix", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"6.6.6.6, 7.7.7.7,203.0.113.5, 10.0.0.1"}}, "ip:203.0.113.5"},
		{"chain split over field lines", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"6.6.6.6", "203.0.113.5, 10.0.0.1"}}, "ip:203.0.113.5"},
		{"XFF entry with port", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5:4711"}}, "ip:203.0.113.5"},
		{"every hop trusted", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"10.0.0.5, 10.0.0.1"}}, "ip:10.0.0.5"},
		{"garbage hop falls back to nearest trusted", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5, unknown, 10.0.0.1"}}, "ip:10.0.0.1"},
		{"trusted peer without header", []middleware.Option{trusted}, "10.0.0.2:1234", nil, "ip:10.0.0.2"},
		{"trusted IPv6 proxy", []middleware.Option{trusted}, "[2001:db8:ffff::1]:443",
			http.Header{"X-Forwarded-For": {"2001:db8:aa:bb:1:2:3:4"}}, "ip:2001:db8:aa:bb::/64"},
		{"Forwarded ignored when XFF configured", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"Forwarded": {"for=1.1.1.1"}}, "ip:10.0.0.2"},
		{"RFC 7239 Forwarded", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"Forwarded": {`for=192.0.2.60;proto=http;by=203.0.113.43, for=10.0.0.1`}}, "ip:192.0.2.60"},
		{"RFC 7239 quoted IPv6 with port", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"Forwarded": {`for=1.1.1.1, For="[2001:db8:cafe::17]:4711";proto=https`}}, "ip:2001:db8:cafe::/64"},
		{"RFC 7239 quoted comma", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"Forwarded": {`for="_a,b", for=192.0.2.1`}}, "ip:192.0.2.1"},
		{"RFC 7239 client's unterminated quote", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"Forwarded": {`for="1.1.1.1, for=192.0.2.1`}}, "ip:192.0.2.1"},
		{"RFC 7239 unknown falls back", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"Forwarded": {`for=192.0.2.1, for=unknown`}}, "ip:10.0.0.2"},
		{"XFF ignored when Forwarded configured", []middleware.Option{trusted, fwd}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"1.1.1.1"}}, "ip:10.0.0.2"},
		{"Forwarded from untrusted peer", []middleware.Option{trusted, fwd}, "198.51.100.7:1234",
			http.Header{"Forwarded": {"for=1.1.1.1"}}, "ip:198.51.100.7"},
		{"IPv6 grouped by /64", nil, "[2001:db8:1:2:3:4:5:6]:443", nil, "ip:2001:db8:1:2::/64"},
		{"IPv6 prefix option", []middleware.Option{middleware.WithIPv6Prefix(56)}, "[2001:db8:1:2ff:3:4:5:6]:443", nil, "ip:2001:db8:1:200::/56"},
		{"IPv4-mapped IPv6 counts as IPv4", nil, "[::ffff:192.0.2.1]:80", nil, "ip:192.0.2.1"},
		{"mapped trusted proxy", []middleware.Option{trusted}, "[::ffff:10.0.0.2]:80",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}}, "ip:203.0.113.5"},
		{"zone dropped", nil, "[fe80::1%eth0]:80", nil, "ip:fe80::/64"},
		{"address without port", nil, "192.0.2.1", nil, "ip:192.0.2.1"},
		{"unix socket peer", nil, "@", nil, "peer:@"},
		{"trusted link-local proxy with zone", []middleware.Option{middleware.WithTrustedProxies("fe80::/10")}, "[fe80::1%eth0]:80",
			http.Header{"X-Forwarded-For": {"203.0.113.5"}}, "ip:203.0.113.5"},
		{"trusted hop with zone", []middleware.Option{middleware.WithTrustedProxies("10.0.0.0/8", "fe80::/10")}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5, fe80::1%eth0"}}, "ip:203.0.113.5"},
		{"untrusted zoned hop is the client", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"6.6.6.6, 2001:db8:aa::1%x"}}, "ip:2001:db8:aa::/64"},
		{"mapped hop in XFF", []middleware.Option{trusted}, "10.0.0.2:1234",
			http.Header{"X-Forwarded-For": {"203.0.113.5, ::ffff:10.0.0.1"}}, "ip:203.0.113.5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			mem := newMem()
			mw, err := middleware.New(rules.MustParse("ip:100/s"), mem, append(tt.opts, middleware.WithScope("s"))...)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = tt.remote
			for k, v := range tt.header {
				r.Header[k] = v
			}
			mw(okHandler).ServeHTTP(httptest.NewRecorder(), r)
			if got := mem.subjects(); len(got) != 1 || got[0] != "ip="+tt.want {
				t.Errorf("subjects = %q, want [ip=%s]", got, tt.want)
			}
		})
	}
}

func TestTrustedProxiesInvalid(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"10.0.0.0/33", "not-an-ip", "10.0.0.1/8/8", ""} {
		t.Run(bad, func(t *testing.T) {
			t.Parallel()
			_, err := middleware.New(rules.MustParse("ip:1/s"), newMem(), middleware.WithTrustedProxies(bad))
			var ce *middleware.ConfigError
			if !errorsAs(err, &ce) || ce.Option != "WithTrustedProxies" {
				t.Fatalf("New = %v, want *ConfigError for WithTrustedProxies", err)
			}
		})
	}
}

// FuzzClientIP checks, for arbitrary peers and proxy headers, that finding
// the client never panics, that an untrusted peer is always the client, and
// that the subject is always an address or the raw peer.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.2:1", "203.0.113.5, 10.0.0.1", `for=192.0.2.60;proto=http, for="[2001:db8::1]:80"`, false)
	f.Add("198.51.100.7:1", "1.1.1.1", "for=1.1.1.1", true)
	f.Add("[::ffff:10.0.0.2]:80", `"", ,`, `for="\"`, true)
	f.Fuzz(func(t *testing.T, remote, xff, fwd string, useForwarded bool) {
		mem := newMem()
		opts := []middleware.Option{middleware.WithTrustedProxies("10.0.0.0/8"), middleware.WithScope("s")}
		if useForwarded {
			opts = append(opts, middleware.WithProxyHeader("Forwarded"))
		}
		mw, err := middleware.New(rules.MustParse("ip:100/s"), mem, opts...)
		if err != nil {
			t.Fatal(err)
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		r.Header.Set("X-Forwarded-For", xff)
		r.Header.Set("Forwarded", fwd)
		mw(okHandler).ServeHTTP(httptest.NewRecorder(), r)
		subj := mem.subjects()
		if len(subj) != 1 {
			t.Fatalf("subjects = %q", subj)
		}
		got := strings.TrimPrefix(subj[0], "ip=")
		peer, perr := netip.ParseAddrPort(remote)
		switch {
		case perr == nil && !netip.MustParsePrefix("10.0.0.0/8").Contains(peer.Addr().Unmap()):
			if want := "ip:" + middleware.CanonicalizeIP(peer.Addr(), 64); got != want {
				t.Fatalf("untrusted peer %q counted as %q, want %q", remote, got, want)
			}
		case strings.HasPrefix(got, "ip:"):
			a := strings.TrimPrefix(got, "ip:")
			if _, err := netip.ParsePrefix(a); err != nil {
				if _, err := netip.ParseAddr(a); err != nil {
					t.Fatalf("subject %q is not an address", got)
				}
			}
		case got != "peer:"+remote:
			t.Fatalf("subject %q for peer %q", got, remote)
		}
	})
}
