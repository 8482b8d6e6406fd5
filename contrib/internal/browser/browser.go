// Package browser starts a headless Chromium for tests and the docs'
// screenshots, with no network beyond loopback.
package browser

import (
	"context"
	"os"
	"os/exec"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// RequireEnv names the environment variable that makes a missing browser
// a test failure rather than a skip (CI sets it).
const RequireEnv = "SLIDELIMIT_REQUIRE_BROWSER"

// Path returns the Chromium binary: $CHROMIUM, or chromium (Debian's
// package), chromium-browser or google-chrome on PATH; "" when none is.
func Path() string {
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts Chromium at path, headless, with a fresh profile in
// userDataDir and no network beyond loopback: every other host resolves to
// nothing and goes through a proxy that does not exist, and the background
// services that phone home (updates, sync, QUIC) are off. Cancel the
// returned context to stop the browser.
func New(ctx context.Context, path, userDataDir string) (context.Context, context.CancelFunc) {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(userDataDir),
		chromedp.Headless,
		chromedp.NoSandbox, // tests may run as root, where the sandbox refuses to start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("no-pings", true),
		// Loopback only: a dead proxy for everything else, and no DNS.
		chromedp.ProxyServer("http://127.0.0.1:9"),
		chromedp.Flag("proxy-bypass-list", "127.0.0.1;localhost;[::1]"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1, EXCLUDE localhost"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	return bctx, func() { cancelBrowser(); cancelAlloc() }
}

// Authorize makes the browser of ctx send authorization (an Authorization
// header value) with every request, as an authenticating proxy would.
func Authorize(ctx context.Context, authorization string) error {
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		return err
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		return err
	}
	_, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders,
		network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": authorization}})
	return err
}
