// Package grpclimit enforces slidelimit rule groups on gRPC methods: unary
// and stream server interceptors that make one atomic decision per call
// across every window of every rule that applies to the caller, with
// the status and details gRPC clients understand.
//
//	lim, err := grpclimit.New(eng, map[string]string{
//		"/shop.Orders/Create": "user:5/s,100/min; ip:50/min; exempt:admin",
//		"/shop.Auth/Login":    "key(account):5/d; count:UNAUTHENTICATED",
//	}, grpclimit.WithDefault("ip:100/s"), grpclimit.WithExempt("/grpc.health.v1.Health/"))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(auth, lim.UnaryServerInterceptor()),
//		grpc.ChainStreamInterceptor(authStream, lim.StreamServerInterceptor()))
//
// # Methods
//
// Each method is named by its full method name, "/pkg.Service/Method", and
// limited by its rule group in the language of package rules. Methods not
// listed get the WithDefault group, if any; WithExempt exempts methods or
// whole services (health checks) from both, and their calls never reach
// Redis. A stream is one call at its start: it is decided and counted
// once, before the handler runs, whatever the number of its messages.
//
// # Subjects and scope
//
// As in the HTTP middleware (see package middleware), and with the same
// subjects, so an HTTP route and a gRPC method sharing a scope: share
// their windows:
//
//   - user and roles come only from the context, where the service's
//     authentication interceptor put them with role.NewContext; an exempt
//     role is passed on without a Redis call.
//   - ip is the peer address (peer.FromContext), unless trusted proxies
//     are configured (middleware.WithTrustedProxies, given with
//     WithMiddlewareOptions as the other shared options) and the peer is
//     one: then the x-forwarded-for (or forwarded, middleware.WithProxyHeader)
//     metadata is read from the right exactly as the HTTP middleware reads
//     the header. IPv6 clients are grouped by /64 (WithIPv6Prefix).
//   - header(Name) is the first value of the incoming metadata key name
//     (metadata keys are case-insensitive); key(name) is what the
//     WithKeyFunc function returns for the call's context; global is one
//     subject for every call. An empty value counts the call by client IP.
//   - param(name) has no meaning for gRPC: New rejects it, at its offset.
//
// The scope is the full method name, so every method has its own windows,
// unless the group's scope: statement names a scope several methods (or
// HTTP routes) share.
//
// # Responses
//
// A limited call's response metadata carries ratelimit-policy and
// ratelimit with the values of the HTTP RateLimit-Policy and RateLimit
// fields (draft-ietf-httpapi-ratelimit-headers), for example
//
//	ratelimit-policy: "user-1s";q=5;w=1, "user-1min";q=100;w=60
//	ratelimit: "user-1s";r=0;t=1
//
// They ride on the response headers when the call sends headers (a unary
// call that succeeds, a stream that sends a message or its header), and in
// the trailers otherwise (read them with grpc.Trailer): a refusal, or a
// handler failing before it sent anything, keeps a Trailers-Only response.
// Response headers would commit the call, and gRPC clients never retry a
// committed call (gRFC A6), so sending them with every call would disable
// the clients' retry policies.
//
// A denied call fails with codes.ResourceExhausted whose details hold a
// google.rpc.RetryInfo — the engine's wait rounded up to whole seconds, at
// least 1, as the HTTP Retry-After, so a client that waits it is never
// early — and a google.rpc.QuotaFailure with a violation per window the
// call does not fit in, the denying one first: its subject is the policy
// name ("user-1s") and its description the limit. The trailer
// grpc-retry-pushback-ms carries the same delay in milliseconds, which is
// what grpc-go's retry policy (a service config retryPolicy with
// RESOURCE_EXHAUSTED in retryableStatusCodes) waits before its next
// attempt. A call whose own cost is above a whole quota could never be
// admitted: it fails with codes.ResourceExhausted and a QuotaFailure but
// no RetryInfo, and a pushback of -1, which tells grpc-go not to retry.
//
// When Redis fails, the group's fail mode decides (fail:open, closed,
// local, or the engine's default): fail:closed answers codes.Unavailable
// with a RetryInfo of 1 s. A call the engine cannot evaluate is
// codes.Internal. Errors are logged (middleware.WithLogger; backend errors
// at most one line per 10 s per Interceptors value), never sent to clients. In shadow mode (mode:shadow)
// calls are counted but never denied and carry no rate-limit metadata.
//
// # Counting by status code
//
// A count: statement lists the status codes whose calls stay counted; an
// admitted call that ends with another code is given back
// (through the decider's FinishAsync, as *engine.Engine has) once its
// handler returns. For gRPC its items are status code names as gRPC spells them,
// either as the specification and service configs do or as grpc-go's
// codes.Code.String does, exactly so spelled:
//
//	count     = "count" ":" code { "," code } .
//	code      = "OK" | "CANCELLED" | "UNKNOWN" | "INVALID_ARGUMENT" | ... | "UNAUTHENTICATED"
//	          | "Canceled" | "Unknown" | "InvalidArgument" | ... | "Unauthenticated" .
//
// so that
//
//	key(account):5/d; ip:50/h; count:UNAUTHENTICATED
//
// allows at most 5 failed logins per account a day, however many succeed.
// Numbers, HTTP statuses and classes ("401", "4xx") are not items. A call
// is counted while its handler runs, so at most the limit of calls whose
// outcome counts are in flight or recorded, exactly as for HTTP (see
// package rules). A handler that panics stays counted. A stream's status
// is the one its handler returns.
//
// # Observability
//
// middleware.WithHook receives the HTTP middleware's middleware.Event for
// every call of a limited method, exempt roles included, so the Hook of
// contrib/promlimit or contrib/otellimit counts gRPC calls as it counts
// HTTP requests. Request is nil; Scope is the full method name unless a
// scope: statement names another; Status is the HTTP status of the same
// answer: 0 when the handler ran, 429 for ResourceExhausted, 503 for
// Unavailable, 500 for Internal and 400 for InvalidArgument.
//
// # In-flight windows
//
// A window "N concurrent" (ip:2 concurrent) bounds the calls of a subject
// that run at once: an admitted call holds a slot until its handler
// returns, a stream until it ends, however it ends (an error, a panic, a
// client that went away). A refusal by an in-flight window carries a
// RetryInfo of one second, as the HTTP middleware's Retry-After does.
//
// # Settlement
//
// middleware.WithSettle(name, s) makes the rules whose cost function
// is name settle after the handler, as for HTTP: a call is admitted
// against its estimate (the WithCostFunc result) and then counts the cost
// its handler reported with middleware.ReportCost(ctx, name, n) on its
// context (a stream's Context). With s.Written, a call that reported
// nothing counts the serialized size of the response messages its handler
// sent (proto.Size, uncompressed, without gRPC's 5-byte prefix): a unary
// call's response when it succeeds (0 when it fails), each message a
// stream's SendMsg accepted; a response that is not a protobuf message
// leaves the cost unknown. A call whose actual cost is unknown keeps its estimate, a
// call that count: gives back is not settled, and s.MaxDebt caps what a
// call is charged beyond its estimate. The settlement rides the call's one
// finish after the handler, unary or stream: engine.Engine.FinishAsync,
// which the engine sends with its next script call (or alone within
// 1 ms), so the call's response does not wait for Redis.
// A group with count:, an in-flight window or WithSettle needs a decider
// that can finish calls, as *engine.Engine can (New fails with a
// *middleware.ConfigError otherwise).
//
// # One life for both transports
//
// A call's life — resolve the caller, price, decide, respond, run, finish
// — is the HTTP middleware's, written once in the slidelimit module and
// reached through its public package transport: the interceptors only
// translate a call into its subjects and costs (transport.Source), the
// verdict into trailers, status details and response metadata, and the
// handler's end into an outcome. This module imports no internal package
// of the slidelimit module.
package grpclimit
