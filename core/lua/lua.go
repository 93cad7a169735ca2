// Package lua holds the Lua sources of the scripts the limiter runs on
// Redis, for tools that preload them (SCRIPT LOAD) or audit them. The
// limiter embeds the same sources: what a tool loads is what it sends.
//
// The scripts share fragments, each written once: clock.lua (the call's
// time), refill.lua (a bucket read and refilled to now), judge.lua (a
// bucket judged for its cost) and charge.lua (a multi-bucket call's
// charge and reply). A line
// "-- #include NAME" in a script is replaced by fragment NAME.lua,
// indented as the line is; the functions below return the scripts so
// built.
package lua

import (
	_ "embed"
	"strings"
)

var (
	//go:embed tokenbucket.lua
	tokenBucketSrc string
	//go:embed concurrency.lua
	concurrencySrc string
	//go:embed settle.lua
	settleSrc string
	//go:embed reserve.lua
	reserveSrc string
	//go:embed clock.lua
	clockSrc string
	//go:embed refill.lua
	refillSrc string
	//go:embed judge.lua
	judgeSrc string
	//go:embed charge.lua
	chargeSrc string

	fragments = map[string]string{"clock": clockSrc, "refill": refillSrc, "judge": judgeSrc, "charge": chargeSrc}

	tokenBucket = build(tokenBucketSrc)
	concurrency = build(concurrencySrc)
	settle      = build(settleSrc)
	reserve     = build(reserveSrc)
)

// includeMark begins a line that build replaces by a fragment.
const includeMark = "-- #include "

// build returns src with each include line replaced by its fragment. An
// unknown fragment is left as the line it is (a comment): the scripts'
// tests then fail, as a script without its refill cannot pass them.
func build(src string) string {
	var b strings.Builder
	b.Grow(len(src) + 2*len(refillSrc) + len(clockSrc) + len(judgeSrc) + len(chargeSrc))
	for line := range strings.Lines(src) {
		body := strings.TrimLeft(line, " ")
		frag, ok := fragments[strings.TrimSpace(strings.TrimPrefix(body, includeMark))]
		if !strings.HasPrefix(body, includeMark) || !ok {
			b.WriteString(line)
			continue
		}
		indent := line[:len(line)-len(body)]
		for fl := range strings.Lines(frag) {
			if strings.TrimSpace(fl) != "" {
				b.WriteString(indent)
			}
			b.WriteString(fl)
		}
	}
	return b.String()
}

// TokenBucket returns the source of the token-bucket script: every check of
// buckets without a concurrency limit.
func TokenBucket() string { return tokenBucket }

// Concurrency returns the source of the script that checks requests whose
// buckets carry a concurrency limit, and renews their slots.
func Concurrency() string { return concurrency }

// Settle returns the source of the script that settles reservations
// (core.Limiter.Settle).
func Settle() string { return settle }

// Reserve returns the source of the script that reserves tokens ahead of
// time and cancels reservations (core.Limiter.Reserve).
func Reserve() string { return reserve }
