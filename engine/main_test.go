package engine_test

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/slidelimit/slidelimit/internal/redistest"
)

// TestMain starts a redis-server for the examples, which cannot take a
// testing.TB. Without redis-server the examples run against an address
// nobody listens on, and their output comes from the fallback limiter,
// which decides the same way.
func TestMain(m *testing.M) {
	tb := &mainTB{}
	if _, err := exec.LookPath("redis-server"); err == nil && examplesRun() {
		redisAddr = redistest.Start(tb).Addr
	} else {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		redisAddr = l.Addr().String()
		l.Close()
	}
	code := m.Run()
	tb.cleanup()
	os.Exit(code)
}

// examplesRun reports whether this process will run the examples: fuzz
// workers and runs filtered to other tests need no server (and a fuzz
// worker is killed without running its cleanup).
func examplesRun() bool {
	flag.Parse()
	if f := flag.Lookup("test.fuzzworker"); f != nil && f.Value.String() == "true" {
		return false
	}
	if f := flag.Lookup("test.run"); f != nil && f.Value.String() != "" {
		re, err := regexp.Compile(f.Value.String())
		return err != nil || re.MatchString("ExampleOne") || re.MatchString("ExampleEngine_Allow")
	}
	return true
}

// mainTB is the part of testing.TB redistest uses, for TestMain.
type mainTB struct {
	testing.TB // never called: the methods redistest uses are below
	cleanups   []func()
	dirs       []string
}

func (tb *mainTB) Helper()           {}
func (tb *mainTB) Cleanup(f func())  { tb.cleanups = append(tb.cleanups, f) }
func (tb *mainTB) Fatal(args ...any) { tb.fail(fmt.Sprint(args...)) }
func (tb *mainTB) Fatalf(format string, args ...any) {
	tb.fail(fmt.Sprintf(format, args...))
}
func (tb *mainTB) Skipf(format string, args ...any) { tb.fail(fmt.Sprintf(format, args...)) }

func (tb *mainTB) TempDir() string {
	d, err := os.MkdirTemp("", "engine-example")
	if err != nil {
		tb.fail(err.Error())
	}
	tb.dirs = append(tb.dirs, d)
	return d
}

func (tb *mainTB) fail(msg string) {
	tb.cleanup()
	fmt.Fprintln(os.Stderr, "TestMain:", msg)
	os.Exit(1)
}

func (tb *mainTB) cleanup() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
	tb.cleanups = nil
	for _, d := range tb.dirs {
		os.RemoveAll(d)
	}
}
