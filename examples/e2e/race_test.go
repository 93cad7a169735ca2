//go:build race

package e2e_test

// raceEnabled builds the example binaries with -race too, so that a data
// race in a running service ends it with status 66 and fails the clean-exit
// check.
const raceEnabled = true
