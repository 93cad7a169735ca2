// Package linearize checks that the limiter's decisions, taken by several
// processes at once against real Redis while it is killed, paused, failed
// over or loses replies, are those of one token bucket per tenant: every
// operation is recorded with its invocation and return time, and
// porcupine searches, per bucket, for one order consistent with real time
// in which the reference model (docs/semantics.md) gives every observed
// answer. The model's time is the store's own, read from the stamp each
// admitted state carries. Degraded decisions are recorded as such: their
// store call may or may not have run, which the model allows once, and
// their answers are checked against their own stated bounds. Seeded
// broken clients (a GET then SET from the client, a refill from skewed
// client clocks, a script replayed after a lost reply) must be caught.
//
// The package has no code of its own: only tests. LINEARIZE_DURATION
// (a Go duration) stretches every history; make linearize sets it.
package linearize
