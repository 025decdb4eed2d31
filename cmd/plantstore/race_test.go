//go:build race

package main

// raceEnabled: the suite runs with -race, so the binary it builds is
// race-checked too.
const raceEnabled = true
