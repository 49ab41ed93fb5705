//go:build race

package main

// crashRaceDetector says whether this test binary has the race detector,
// so the crash harness runs a splitzip built without it instead.
const crashRaceDetector = true
