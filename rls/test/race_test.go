//go:build race

package test

// raceEnabled builds tollgate-rls with -race too, and slows the flood with
// it (the race-built service is about ten times slower).
const raceEnabled = true
