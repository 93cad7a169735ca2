package linearize_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/lua"
	tgquota "github.com/tollgate-go/tollgate/core/quota"
)

// Seeded broken clients: each speaks the limiter's storage format but
// breaks one rule, and the checker must catch it.
//
//   - getset: reads the bucket with GET and writes it with SET from the
//     client (the server's TIME as the clock): not atomic, so two replicas
//     can spend the same tokens.
//   - clientclock: the limiter's script, given each replica's own clock,
//     skewed as different machines' clocks are, while the model takes the
//     time from the server.
//   - replay: the limiter's script sent through a client that retries a
//     command whose reply was lost (go-redis's default): charged twice.
//   - lenient: the limiter's script admitting a bucket half a token short
//     of the cost (its answers' arithmetic otherwise right).
//   - slots: the concurrency script admitting while every slot is in use
//     (one more than the limit), its slots released with ZREM.
//   - settle: the real limiter's checks, settled by the settle script
//     charging nothing (a refund still refunds) and reporting nothing
//     forgiven.
//   - reserve: checks, and reservations by the reserve script granting
//     one that must wait without charging it (one that needs no wait is
//     charged).
//
// Each broken script is the limiter's own with one condition replaced: a
// replacement that no longer finds its text fails the history.
type seeded struct {
	cfg    config
	c      redis.UniversalClient
	script *redis.Script
	key    func(tenant string) string
	ttl    string
	lim    *core.Limiter // settle: the checks
	// reserve: the reservations' script (the checks run script, unbroken)
	reserveScript *redis.Script
}

// settlePerBucket: the settle script takes each bucket's capacity, rate,
// delta and debt cap (ARGV[4i-2] to ARGV[4i+1]); before, one delta
// (ARGV[2]) and each bucket's capacity and rate. The seeded settle client
// speaks either (once every branch has the per-bucket form, the other can
// go).
var settlePerBucket = strings.Contains(lua.Settle(), "tonumber(ARGV[4 * i])")

// settleMarked: the settle script takes the reservation's mark as its last
// key and the mark's life as its last argument (a reservation is settled
// once); before, neither.
var settleMarked = strings.Contains(lua.Settle(), "local mark = KEYS[n + 1]")

// broken is src with old replaced by new (src itself for a control), or
// an error when src lacks old.
func broken(cfg config, src, old, new string) (*redis.Script, error) {
	if !strings.Contains(src, old) {
		return nil, fmt.Errorf("%s: %q is no longer in the script", cfg.Client, old)
	}
	if cfg.Control {
		return redis.NewScript(src), nil
	}
	return redis.NewScript(strings.Replace(src, old, new, 1)), nil
}

func newSeeded(cfg config, uc redis.UniversalClient, clk *clock) (decider, error) {
	s := &seeded{cfg: cfg, c: uc, script: redis.NewScript(lua.TokenBucket()),
		key: func(tenant string) string { return cfg.Prefix + ":{" + tenant + "}:" + tgquota.DefaultClass },
		ttl: strconv.FormatInt(int64(float64(cfg.Capacity)/cfg.Rate*1000)+1000, 10)}
	var err error
	switch cfg.Client {
	case "getset", "clientclock":
	case "replay":
		// a client of go-redis's defaults: a command whose reply was lost
		// is sent again
		s.c = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], MaxRetries: 3,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond})
	case "lenient":
		s.script, err = broken(cfg, lua.TokenBucket(), "if cost > cap or tokens < cost then", "if cost > cap or tokens < cost - 0.5 then")
	case "slots":
		s.script, err = broken(cfg, lua.Concurrency(), "(held >= limit or", "(held > limit or")
	case "reserve":
		s.reserveScript, err = broken(cfg, lua.Reserve(), "local left = toks[i] - costs[i]", "local left = toks[i] - (wait > 0 and 0 or costs[i])")
	case "settle":
		arg := "ARGV[2]"
		if settlePerBucket {
			arg = "ARGV[4 * i]"
		}
		if s.script, err = broken(cfg, lua.Settle(), "local delta = tonumber("+arg+")", "local delta = math.min(0, tonumber("+arg+"))"); err == nil {
			s.lim, err = newLimiter(cfg, uc, clk)
		}
	default:
		return nil, fmt.Errorf("unknown client %q", cfg.Client)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *seeded) close() {
	switch s.cfg.Client {
	case "replay":
		_ = s.c.Close()
	case "settle":
		_ = s.lim.Close()
	}
}

func (s *seeded) decide(ctx context.Context, tenant string, rng *rand.Rand) []op {
	cost := 1 + rng.Int64N(2)
	switch s.cfg.Client {
	case "slots":
		return s.slots(ctx, tenant, cost, rng)
	case "settle":
		return s.settle(ctx, tenant, cost, rng)
	case "reserve":
		if rng.IntN(2) == 0 {
			return s.reserve(ctx, tenant, cost)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	o := op{Call: time.Now().UnixNano(), Cost: cost}
	var (
		reply string
		err   error
	)
	if s.cfg.Client == "getset" {
		reply, err = s.getSet(ctx, s.key(tenant), cost)
	} else {
		now := ""
		if s.cfg.Client == "clientclock" {
			now = strconv.FormatInt(time.Now().Add(s.cfg.Skew).UnixMicro(), 10)
		}
		reply, err = s.script.Run(ctx, s.c, []string{s.key(tenant)}, now, cost, s.cfg.Capacity,
			strconv.FormatFloat(s.cfg.Rate, 'g', -1, 64), s.ttl).Text()
	}
	o.Return = time.Now().UnixNano()
	if err != nil {
		o.Kind, o.Reason = ambiguous, "error"
		return []op{o}
	}
	tok, stamp, _ := strings.Cut(reply, " ")
	o.Tokens, _ = strconv.ParseFloat(tok, 64)
	if stamp == "" {
		o.Kind, o.Reason = denied, "over_limit"
		return []op{o}
	}
	o.Kind, o.Reason, o.Allowed = admitted, "ok", true
	o.Stamp, _ = strconv.ParseInt(stamp, 10, 64)
	return []op{o}
}

// slots checks one request with the broken concurrency script (the
// limiter's arguments: one bucket, a lease of 10 s), holds an admitted
// request's slot a moment and removes it.
func (s *seeded) slots(ctx context.Context, tenant string, cost int64, rng *rand.Rand) []op {
	key := s.key(tenant)
	id := strconv.FormatInt(rng.Int64(), 36)
	o := op{Call: time.Now().UnixNano(), Cost: cost, Slot: true}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	v, err := s.script.Run(cctx, s.c, []string{key, key + ":slots"}, "", cost, s.cfg.Capacity,
		strconv.FormatFloat(s.cfg.Rate, 'g', -1, 64), s.ttl, s.cfg.Concurrency, 10_000_000, id, 11_000).Slice()
	cancel()
	o.Return = time.Now().UnixNano()
	if err != nil || len(v) != 6 {
		o.Kind, o.Reason = ambiguous, "error"
		return []op{o}
	}
	reason, _ := v[1].(int64)
	o.Held, _ = v[3].(int64)
	st, _ := v[5].(string)
	tok, stamp, _ := strings.Cut(st, " ")
	o.Tokens, _ = strconv.ParseFloat(tok, 64)
	switch reason {
	case 0:
		o.Kind, o.Allowed = admitted, true
		o.Stamp, _ = strconv.ParseInt(stamp, 10, 64)
	case 3:
		o.Kind = slotDenied
		return []op{o}
	default:
		o.Kind = denied
		return []op{o}
	}
	time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
	r := op{Kind: released, Cost: cost, Slot: true, Call: time.Now().UnixNano()}
	cctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
	_ = s.c.ZRem(cctx, key+":slots", id).Err()
	cancel()
	r.Return = time.Now().UnixNano()
	return []op{o, r}
}

// reserve reserves one request with the broken reserve script (the
// limiter's arguments: one bucket, a max wait of reserveWait); the other
// half of the requests are checks by the token-bucket script.
func (s *seeded) reserve(ctx context.Context, tenant string, cost int64) []op {
	key := s.key(tenant)
	o := op{Call: time.Now().UnixNano(), Cost: cost, MaxWait: reserveWait.Microseconds()}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	v, err := s.reserveScript.Run(cctx, s.c, []string{key, key + ":reserved"}, "", "r", reserveWait.Microseconds(), s.cfg.Capacity,
		strconv.FormatFloat(s.cfg.Rate, 'g', -1, 64), cost).Slice()
	cancel()
	o.Return = time.Now().UnixNano()
	if err != nil || len(v) != 5 {
		o.Kind, o.Reason = reserveFailed, "error"
		return []op{o}
	}
	status, _ := v[0].(int64)
	st, _ := v[4].(string)
	tok, stamp, _ := strings.Cut(st, " ")
	o.Tokens, _ = strconv.ParseFloat(tok, 64)
	switch status {
	case 0:
		o.Kind, o.Reason, o.Allowed = reserved, "ok", true
		o.Stamp, _ = strconv.ParseInt(stamp, 10, 64)
	default:
		o.Kind, o.Reason = reserveDenied, "over_limit"
	}
	return []op{o}
}

// settle checks one request with the real limiter and settles half of the
// admitted ones with the broken settle script.
func (s *seeded) settle(ctx context.Context, tenant string, cost int64, rng *rand.Rand) []op {
	o, _ := checkOnce(ctx, s.lim, core.Request{Tenant: tgquota.Tenant{ID: tenant}, Cost: cost}, 0)
	actual := actualCost(rng, s.cfg)
	if o.Kind != admitted || actual == cost || rng.IntN(2) == 0 {
		return []op{o}
	}
	r := op{Kind: settled, Cost: cost, Delta: actual - cost, Call: time.Now().UnixNano()}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	rate := strconv.FormatFloat(s.cfg.Rate, 'g', -1, 64)
	keys := []string{s.key(tenant)}
	args := []any{"", actual - cost, s.cfg.Capacity, rate}
	if settlePerBucket {
		args = []any{"", s.cfg.Capacity, rate, actual - cost, 0} // no debt cap
	}
	if settleMarked {
		// the reservation's mark: its own, living 10 s
		keys = append(keys, s.key(tenant)+":settled:"+strconv.FormatUint(rng.Uint64(), 36))
		args = append(args, 10_000)
	}
	v, err := s.script.Run(cctx, s.c, keys, args...).Slice()
	cancel()
	r.Return = time.Now().UnixNano()
	if err != nil || len(v) == 0 {
		r.Kind = settleFailed
		return []op{o, r}
	}
	// what the script forgave (a debt past its floor): as Limiter.Settle
	// returns it
	r.Forgiven, _ = v[0].(int64)
	return []op{o, r}
}

// getSet is the script's arithmetic run on the client between a GET and a
// SET: the same answers, without the atomicity.
func (s *seeded) getSet(ctx context.Context, key string, cost int64) (string, error) {
	t, err := s.c.Time(ctx).Result()
	if err != nil {
		return "", err
	}
	now := t.UnixMicro()
	q := quota{capacity: float64(s.cfg.Capacity), rate: s.cfg.Rate}
	tok, last := q.capacity, now
	v, err := s.c.Get(ctx, key).Result()
	if err != nil && err != redis.Nil {
		return "", err
	}
	if a, b, ok := strings.Cut(v, " "); ok {
		tok, _ = strconv.ParseFloat(a, 64)
		last, _ = strconv.ParseInt(b, 10, 64)
	}
	tok = q.refill(tok, last, now)
	if tok < float64(cost) {
		return strconv.FormatFloat(tok, 'g', 17, 64), nil
	}
	state := strconv.FormatFloat(tok-float64(cost), 'g', 17, 64) + " " + strconv.FormatInt(max(now, last), 10)
	return state, s.c.Set(ctx, key, state, time.Duration(q.capacity/q.rate*float64(time.Second))+time.Second).Err()
}
