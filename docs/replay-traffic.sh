#!/bin/sh
# Writes twenty minutes of demo traffic with four bursts to the Combined
# Log Format file given (default access.log), as docs/replay.md's run: an
# anonymous client on GET /health at 2/s, alice and bob each downloading a
# file a second, then anonymous at +10/s (minute 3) and +8/s (minutes
# 14-16), alice at +6/s (minute 8), bob at +4/s (minute 17). Run it from
# the repository's root; it takes twenty minutes.
set -e
LOG=${1:-access.log}
BIN=$(mktemp -d)
trap 'kill $DEMO 2>/dev/null; rm -rf "$BIN"' EXIT
go build -o "$BIN/demo" ./cmd/demo
"$BIN/demo" -addr 127.0.0.1:18931 >/dev/null 2>&1 &
DEMO=$!
sleep 2
L="$BIN/demo load -url http://127.0.0.1:18931 -log $LOG"
$L -path /health -rps 2 -duration 1200s >/dev/null &
$L -token alice -path /files/1 -rps 1 -duration 1200s >/dev/null &
$L -token bob -path /files/2 -rps 1 -duration 1200s >/dev/null &
(sleep 180; $L -path /health -rps 10 -duration 60s >/dev/null) &
(sleep 480; $L -token alice -path /files/1 -rps 6 -duration 90s >/dev/null) &
(sleep 840; $L -path /health -rps 8 -duration 120s >/dev/null) &
(sleep 1020; $L -token bob -path /files/2 -rps 4 -duration 60s >/dev/null) &
sleep 1205
