// Command screenshot saves a PNG of a page as headless Chromium renders it,
// for the docs: the operator's page of the running demo.
//
//	go run ./cmd/demo &
//	go run ./cmd/demo load -path /files/1 -token alice -rps 50 -duration 5s
//	cd contrib && go run ./internal/screenshot -url http://127.0.0.1:8080/admin/ui/ -token root -out ../docs/admin-ui.png
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/slidelimit/slidelimit/contrib/internal/browser"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:8080/admin/ui/", "page to take")
	token := flag.String("token", "root", "Authorization: Bearer TOKEN")
	out := flag.String("out", "admin-ui.png", "PNG file to write")
	flag.Parse()
	if err := run(*url, *token, *out); err != nil {
		fmt.Fprintln(os.Stderr, "screenshot:", err)
		os.Exit(1)
	}
}

func run(url, token, out string) error {
	path := browser.Path()
	if path == "" {
		return fmt.Errorf("no chromium on PATH (apt-get install chromium)")
	}
	dir, err := os.MkdirTemp("", "screenshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bctx, stop := browser.New(ctx, path, dir)
	defer stop()
	if err := browser.Authorize(bctx, "Bearer "+token); err != nil {
		return err
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("h1"))); err != nil {
		return err
	}
	png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		return err
	}
	return os.WriteFile(out, png, 0o644)
}
