// Package linearize checks that the limiter's decisions, taken by several
// processes at once against real Redis while it is killed, paused, failed
// over or loses replies, are those of the reference model
// (docs/semantics.md) per tenant: every operation is recorded with its
// invocation and return time, and porcupine searches, per tenant, for one
// order consistent with real time in which the model gives every observed
// answer. The model's time is the store's own, read from the stamp each
// admitted state carries.
//
// What the model checks: an admission's balance is the script's
// arithmetic from the previous state, its stamp lies in its call, and the
// bucket held the cost (the refilled balance at the stamp, or, after
// operations at unknown times, the balance the answer implies, is at
// least the cost); a denial's balance is the refill at some time of its
// call and below the cost. A multi-bucket check (Request.Also, with one
// cost or AlsoCosts) is all-or-nothing over its buckets: admitted only
// when each holds its own cost, all charged. A check of a class with a
// concurrency limit is admitted only below the limit: the model counts
// the slots held by requests admitted and not yet released, and those
// held by nobody (a lost reply's, a release not yet applied) that may be
// freed at any time, so that no linearization holds more than the limit
// at any point. A settle charges the difference (less what it reports
// forgiven) or refunds it at an unknown time of its call. A reservation
// (Limiter.Reserve) charges every bucket it names its cost at its stamp,
// as an admission, but from any balance: it may leave a bucket below zero
// by no more than the refill of its max wait (the script's wait, whole
// microseconds rounded up, fits the max wait); a refused one charged
// nothing, its balance at some time of its call, and some bucket's wait
// exceeded the max wait; a lost one charged its cost once or not at all;
// a cancel gave back 0 to the cost at an unknown time of its call (how
// much later reservations allow is not followed). A deny-cache
// denial may miss what refunds that returned less than the deny cache's
// bound (a check timeout, widened by the replica's longest store denial
// and its clock's steps) before its call gave back (see WithDenyCache and
// docs/reliability.md); the model counts those refunds per bucket.
//
// Degraded decisions are recorded as such: their store call may or may
// not have run, which the model allows once, and their answers are
// checked against their own stated bounds. Seeded broken clients must be
// caught: a GET then SET from the client, a refill from skewed client
// clocks, a script replayed after a lost reply, a token-bucket script
// admitting half a token short, a concurrency script admitting one over
// the limit, a settle script that never charges, a reserve script that
// grants a waiting reservation without charging it; the broken scripts'
// unbroken controls must pass.
//
// The package has no code of its own: only tests. LINEARIZE_DURATION
// (a Go duration) stretches every history and runs every history with
// each mix (multi-bucket checks, slots, settles, reservations); make
// linearize sets it.
package linearize
