package transport

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is the token-bucket script: its source, for EVAL after a
// NOSCRIPT and for loading, and its SHA1, boxed once (boxing a string
// allocates).
type Script struct {
	source string
	sha    any
	// alt is a second script the same callers send (see Pair): a command
	// line names its script by its SHA
	alt *Script
}

// NewScript returns the Script of source.
func NewScript(source string) *Script {
	return &Script{source: source, sha: redis.NewScript(source).Hash()}
}

// Pair returns main that also carries the calls of alt: a Batcher or Direct
// built with it sends either script's command lines (made by main.Args or
// alt.Line), loads both, and falls back to the EVAL of the script a line
// names after a NOSCRIPT.
func Pair(main, alt *Script) *Script {
	s := *main
	s.alt = alt
	return &s
}

// Line returns a whole EVALSHA command line of s, not pooled: "evalsha",
// the SHA, the number of keys, the keys, then args.
func (s *Script) Line(keys []string, args ...any) []any {
	line := make([]any, 0, 3+len(keys)+len(args))
	line = append(line, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		line = append(line, k)
	}
	return append(line, args...)
}

// Run runs one command line of s (or of its pair) on c, once: EVALSHA, then
// EVAL after a NOSCRIPT.
func (s *Script) Run(ctx context.Context, c redis.UniversalClient, args []any) (any, error) {
	return s.run(ctx, c, args)
}

// sourceOf returns the source of the script a command line names.
func (s *Script) sourceOf(args []any) string {
	if s.alt != nil && args[1] == s.alt.sha {
		return s.alt.source
	}
	return s.source
}

// smallCosts holds the cost argument of the common small costs, boxed once.
var smallCosts = func() (a [65]any) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

func costArg(cost int64) any {
	if cost >= 0 && cost < int64(len(smallCosts)) {
		return smallCosts[cost]
	}
	return strconv.FormatInt(cost, 10)
}

// Args returns the whole EVALSHA command line of one check in one
// slice: "evalsha", the SHA, the number of keys, the keys, then the script's
// arguments (see the script's header). go-redis's Script.Run would build a
// second slice and box the SHA on every call. With costs nil every bucket
// is charged cost; otherwise each bucket has its own (costs, in the order
// of keys): the cost argument is then "" and each bucket's group ends with
// its cost. The slice comes from a pool: give it back with PutArgs once
// nothing can read it any more.
func (s *Script) Args(keys []string, now string, cost int64, costs []int64, quotas [][3]any) *[]any {
	group := 3
	if costs != nil {
		group = 4
	}
	n := 3 + len(keys) + 2 + group*len(quotas)
	p := argsPool.Get().(*[]any)
	if cap(*p) < n {
		*p = make([]any, 0, n)
	}
	args := append((*p)[:0], "evalsha", s.sha, len(keys))
	for _, k := range keys {
		args = append(args, k)
	}
	if costs == nil {
		args = append(args, now, costArg(cost))
	} else {
		args = append(args, now, "")
	}
	for i, q := range quotas {
		args = append(args, q[0], q[1], q[2])
		if costs != nil {
			args = append(args, costArg(costs[i]))
		}
	}
	*p = args
	return p
}

// argsPool recycles command lines: a check's line is the largest thing it
// allocates, and is dead once its command answered.
var argsPool = sync.Pool{New: func() any { return new([]any) }}

// PutArgs recycles a command line that nothing reads any more: go-redis
// keeps no reference to a command's arguments after it answered, and a
// batch hands a call its answer only after it is done with the call.
func PutArgs(p *[]any) {
	clear(*p) // hold no keys
	*p = (*p)[:0]
	argsPool.Put(p)
}

// cmd is the command for args; eval makes it an EVAL of the source
// (after NOSCRIPT) on a copy, so args stays an EVALSHA.
func (s *Script) cmd(ctx context.Context, args []any, eval bool) *redis.Cmd {
	if eval {
		args = append([]any{"eval", s.sourceOf(args)}, args[2:]...)
	}
	cmd := redis.NewCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// run runs the script once: EVALSHA, then EVAL when the server
// answers NOSCRIPT (the command was not executed, so sending it again is
// safe). Neither is ever retried by go-redis (see noRetryCmd).
func (s *Script) run(ctx context.Context, c redis.UniversalClient, args []any) (any, error) {
	cmd := s.cmd(ctx, args, false)
	_ = c.Process(ctx, noRetryCmd{cmd})
	v, err := cmd.Result()
	if isNoScript(err) {
		cmd = s.cmd(ctx, args, true)
		_ = c.Process(ctx, noRetryCmd{cmd})
		v, err = cmd.Result()
	}
	return v, err
}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// loadOn loads s (and its pair) on c.
func (s *Script) loadOn(ctx context.Context, c redis.Cmdable) error {
	if err := c.ScriptLoad(ctx, s.source).Err(); err != nil {
		return err
	}
	if s.alt != nil {
		return c.ScriptLoad(ctx, s.alt.source).Err()
	}
	return nil
}

// withCallTimeout bounds a call's context by d (see Client).
func withCallTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// runWithin is run with ctx bounded by d (see withCallTimeout).
func (s *Script) runWithin(ctx context.Context, c redis.UniversalClient, args []any, d time.Duration) (any, error) {
	ctx, cancel := withCallTimeout(ctx, d)
	defer cancel()
	return s.run(ctx, c, args)
}
