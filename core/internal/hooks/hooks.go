// Package hooks lets package core reach behaviour of its subpackages that is
// no part of their public API.
package hooks

import "time"

// BoundWait, set by package quota, makes a first override lookup of the
// resolver r (when it is a quota.TieredResolver) wait at most d: a
// Limiter's check timeout.
var BoundWait func(r any, d time.Duration)
