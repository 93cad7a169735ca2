// Package hooks lets package core reach behaviour of its subpackages that is
// no part of their public API.
package hooks

import "time"

// BoundWait, set by package quota, makes a first override lookup of the
// resolver r (when it is a quota.TieredResolver) wait at most d: a
// Limiter's check timeout.
var BoundWait func(r any, d time.Duration)

// Resolve, set by package quota, returns for a resolver r that is a
// quota.TieredResolver its Buckets that also says why an answer is the
// tier defaults given in place of overrides not loaded in time ("timeout",
// "busy"; "" when it is not), a
// func(context.Context, quota.Tenant, string) ([]quota.Bucket, string, error);
// nil for any other resolver.
var Resolve func(r any) any
