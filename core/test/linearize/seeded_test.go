package linearize_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
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
type seeded struct {
	cfg    config
	c      redis.UniversalClient
	script *redis.Script
	key    func(tenant string) string
	ttl    string
}

func newSeeded(cfg config, uc redis.UniversalClient) (decider, error) {
	s := &seeded{cfg: cfg, c: uc, script: redis.NewScript(lua.TokenBucket()),
		key: func(tenant string) string { return cfg.Prefix + ":{" + tenant + "}:" + tgquota.DefaultClass },
		ttl: strconv.FormatInt(int64(float64(cfg.Capacity)/cfg.Rate*1000)+1000, 10)}
	switch cfg.Client {
	case "getset", "clientclock":
	case "replay":
		// a client of go-redis's defaults: a command whose reply was lost
		// is sent again
		s.c = redis.NewClient(&redis.Options{Addr: cfg.Addrs[0], MaxRetries: 3,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: 2 * time.Millisecond})
	default:
		return nil, fmt.Errorf("unknown client %q", cfg.Client)
	}
	return s, nil
}

func (s *seeded) close() {
	if s.cfg.Client == "replay" {
		_ = s.c.Close()
	}
}

func (s *seeded) decide(ctx context.Context, tenant string, cost int64) op {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	o := op{Call: time.Now().UnixNano()}
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
		return o
	}
	tok, stamp, _ := strings.Cut(reply, " ")
	o.Tokens, _ = strconv.ParseFloat(tok, 64)
	if stamp == "" {
		o.Kind, o.Reason = denied, "over_limit"
		return o
	}
	o.Kind, o.Reason, o.Allowed = admitted, "ok", true
	o.Stamp, _ = strconv.ParseInt(stamp, 10, 64)
	return o
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
