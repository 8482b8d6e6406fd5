package engine_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/slidelimit/slidelimit/engine"
	"github.com/slidelimit/slidelimit/rules"
)

// newRedis returns a client of an in-process miniredis, so that the
// examples run the Redis path (the script) wherever they run; production
// code passes a client of a real Redis.
func newRedis() (*redis.Client, func()) {
	mr, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// May user 42 reply? At most 5 replies per minute.
func ExampleOne() {
	rdb, done := newRedis()
	defer done()
	eng, err := engine.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	ctx := context.Background()
	for range 6 {
		d, _ := eng.Allow(ctx, engine.One("reply", rules.User, "42", rules.Window{Limit: 5, Period: time.Minute}))
		fmt.Println(d.Allowed, d.Windows[0].Remaining, d.RetryAfter.Round(time.Second), d.Source)
	}
	// The sixth request is refused from what Redis said about the fifth,
	// without asking Redis again.

	// Output:
	// true 4 0s redis
	// true 3 0s redis
	// true 2 0s redis
	// true 1 0s redis
	// true 0 0s redis
	// false 0 1m0s cache
}

// A request is admitted only if every window of every check has room, and
// then it counts in all of them.
func ExampleEngine_Allow() {
	rdb, done := newRedis()
	defer done()
	eng, err := engine.New(rdb, engine.WithKeyPrefix("example:"))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	upload := func(ip, user string) engine.Request {
		return engine.Request{
			Scope: "POST /upload",
			Checks: []engine.Check{
				{Rule: rules.Rule{Kind: rules.IP, Windows: []rules.Window{{Limit: 100, Period: time.Minute}}}, Subject: ip},
				{Rule: rules.Rule{Kind: rules.User, Windows: []rules.Window{
					{Limit: 2, Period: time.Second},
					{Limit: 10, Period: time.Hour},
				}}, Subject: user},
			},
		}
	}
	ctx := context.Background()
	for range 3 {
		d, err := eng.Allow(ctx, upload("192.0.2.1", "ann"))
		if err != nil {
			log.Print(err)
		}
		if d.Allowed {
			fmt.Println("allowed by", d.Source)
		} else {
			fmt.Printf("denied by %s window %d/%v\n", upload("", "").Checks[d.Denied.Check].Kind, d.Denied.Window.Limit, d.Denied.Window.Period)
		}
	}
	// Output:
	// allowed by redis
	// allowed by redis
	// denied by user window 2/1s
}

// Only failed logins count: a login is admitted and counted before the
// password is checked, and given back when it succeeds.
func ExampleEngine_Finish() {
	rdb, done := newRedis()
	defer done()
	eng, err := engine.New(rdb, engine.WithKeyPrefix("example-giveback:"))
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	ctx := context.Background()
	login := engine.One("login", rules.Key, "account:ann", rules.Window{Limit: 2, Period: 24 * time.Hour})
	login.Checks[0].Name = "account"
	for _, password := range []string{"right", "right", "right", "wrong", "wrong", "wrong", "right"} {
		d, err := eng.Allow(ctx, login)
		if err != nil {
			log.Print(err)
		}
		if !d.Allowed {
			fmt.Println(password, "denied")
			continue
		}
		if password == "right" {
			// Success does not count: take the attempt back.
			if err := eng.Finish(ctx, d, engine.Outcome{GiveBack: true}); err != nil {
				log.Print(err)
			}
		}
		fmt.Println(password, "checked")
	}
	// Output:
	// right checked
	// right checked
	// right checked
	// wrong checked
	// wrong checked
	// wrong denied
	// right denied
}

// A completion is admitted against the 500 tokens it may use and settled
// to the 120 it used: the window then holds 120.
func ExampleEngine_Finish_settle() {
	rdb, done := newRedis()
	defer done()
	eng, err := engine.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	ctx := context.Background()
	tokens := rules.Rule{Kind: rules.User, Cost: "tokens", Windows: []rules.Window{{Limit: 1000, Period: time.Minute}}}
	req := engine.Request{Scope: "complete", Checks: []engine.Check{{Rule: tokens, Subject: "42", Cost: 500}}}
	d, _ := eng.Allow(ctx, req)
	fmt.Println(d.Allowed, d.Windows[0].Used)
	if err := eng.Finish(ctx, d, engine.Outcome{Actual: []int64{120}}); err != nil {
		log.Fatal(err)
	}
	// The next request sees the 120 tokens settled, not the 500 estimated.
	d, _ = eng.Allow(ctx, req)
	fmt.Println(d.Allowed, d.Windows[0].Used)

	// Output:
	// true 500
	// true 620
}

// Once a window denies user 42, the user is blocked for an hour, though
// the minute's window has room again after a minute.
func ExampleCheck_block() {
	rdb, done := newRedis()
	defer done()
	eng, err := engine.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer eng.Close()

	ctx := context.Background()
	req := engine.One("login", rules.User, "42", rules.Window{Limit: 2, Period: time.Minute})
	req.Checks[0].Block = time.Hour
	for range 4 {
		d, _ := eng.Allow(ctx, req)
		fmt.Println(d.Allowed, d.Blocked, d.RetryAfter.Round(time.Minute))
	}

	// Output:
	// true false 0s
	// true false 0s
	// false true 1h0m0s
	// false true 1h0m0s
}
