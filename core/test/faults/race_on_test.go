//go:build race

package faults_test

// raceEnabled: the race detector slows the process about tenfold, so the
// flood scenario offers a tenth of the load (floodPause) to stay a flood of
// one tenant rather than a starvation of the whole process.
const raceEnabled = true
