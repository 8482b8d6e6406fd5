// Package replay runs access logs through rules as production would have
// decided them, for `slidelimit replay` (cmd/slidelimit, docs/replay.md).
//
// Run reads NCSA Common/Combined and JSON-lines logs (format detected per
// file; gzip by name or magic bytes), puts their lines in time order
// through a bounded reorder buffer per file (Config.Reorder; equal times
// keep file order, then files are merged), sends each request to the route
// net/http's ServeMux would pick, builds its engine checks as the
// middleware does (subjects from the client address and authuser, an
// anonymous user counted by IP, cost bytes from the logged size, the
// group's block, count: from the logged status) and decides it at the
// log's time.
//
// Decisions are made in process by default: the script's semantics for
// windows without a grain (every window read, blocks, all-or-nothing
// admission), 2.5 to 8 µs a line on two cores, which TestDifferentialRedis holds to the
// engine's script on a real Redis request by request. Windows with a grain,
// Config.Decider Script, or Config.Redis send every request through the
// engine itself (engine.WithClock at the log's time) on an embedded
// miniredis or a Redis server, about 300 µs a request on miniredis.
//
// Memory is bounded by the live windows and the reorder buffers, not by
// the log's length, span or times: keys whose entries have left their
// longest window are swept, a key keeps only its longest window's
// entries, the reorder buffers hold one horizon of lines and at most
// MaxReorder bytes of them (lines of one second included), and a line over
// MaxLine is skipped without being held. The report's per-subject counts
// grow with the number of distinct subjects; its time series has at most
// maxBuckets buckets, coarser for a log spanning more than a week. Lines
// dated outside 1970 to 2249 (2000 to 2249 through the engine's script,
// whose clock starts in 2000) are bad lines.
//
// A log's text reaches the text report, the summary and the bad lines
// through Printable, which escapes control characters.
//
// Run is not safe for concurrent use of one Config's readers; separate
// runs are independent.
package replay
