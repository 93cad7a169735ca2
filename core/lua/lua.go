// Package lua holds the Lua sources of the scripts the limiter runs on
// Redis, for tools that preload them (SCRIPT LOAD) or audit them. The
// limiter embeds the same sources: what a tool loads is what it sends.
package lua

import _ "embed"

var (
	//go:embed tokenbucket.lua
	tokenBucket string
	//go:embed concurrency.lua
	concurrency string
	//go:embed settle.lua
	settle string
)

// TokenBucket returns the source of the token-bucket script: every check of
// buckets without a concurrency limit.
func TokenBucket() string { return tokenBucket }

// Concurrency returns the source of the script that checks requests whose
// buckets carry a concurrency limit, and renews their slots.
func Concurrency() string { return concurrency }

// Settle returns the source of the script that settles reservations
// (core.Limiter.Settle).
func Settle() string { return settle }
