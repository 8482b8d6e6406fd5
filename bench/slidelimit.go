package main

// Names of the slidelimit configurations.
const (
	slidelimit2W = "slidelimit 2-window"
	slidelimit1W = "slidelimit 1-window"
)

// slidelimitLibraries are the slidelimit configurations under test. They
// are added once the engine package builds.
var slidelimitLibraries []library
