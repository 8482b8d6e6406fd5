// Package tally keeps the fleet-wide denial tallies that the operator's
// page (Limiter.AdminHandler in the root package, internal/admin) shows:
// which subjects are denied most, by which rule of which scope.
//
// # Denial tallies
//
// The engine reports every denial of Allow by a window (by Redis, the
// fallback limiter or the cache of denials) to a hook (engine.WithDenialHook);
// [Tallies.Note] adds one, in process, to its (scope, rule ID, subject
// of the denying check), and a goroutine ([Tallies.Start]) writes what was
// added every [DefaultFlush] in one pipeline, so that the tallies of
// every process sharing the Redis and prefix add up and a request pays no
// round trip for them. A process gathers at most 1,024 entries between
// writes (a new one replaces the least denied, whose count is lost) and
// each bucket in Redis keeps its 256 most denied: 10 s buckets for views
// up to 5 min, 1 min buckets up to an hour, all under the hash tag
// {tally} (one cluster slot; the key format is in the header of
// lua/multi_window.lua). A subject stored hashed (over 128 bytes, or any
// with engine.WithHashedSubjects) is given by the engine by its stored
// hash, made at denial time, with at most its first 48 bytes to show: the
// tallies never hold a long subject, and a write only sends, its deadline
// (engine.WithTimeout) covering the Redis call alone. A failed write is
// dropped and counted ([Tallies.Stats]), and logged once until writes
// succeed again. [Tallies.TopDenied] reads them. The root package creates
// a Limiter's tallies, wires the engine's hook and stops the writer on
// Close; the period is 1 s (the root package's tests set it, or turn the
// tallies off, in its export_test.go).
package tally
