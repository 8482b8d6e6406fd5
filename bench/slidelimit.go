package main

// slidelimitLibraries are the slidelimit configurations under test. They
// are added once the engine package builds.
var slidelimitLibraries []library
