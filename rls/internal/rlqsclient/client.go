// Package rlqsclient is a rate limit quota (RLQS) client for tests that
// behaves as Envoy's rate_limit_quota HTTP filter does, read from
// envoyproxy/envoy's source (source/extensions/filters/http/rate_limit_quota/
// global_client_impl.cc, filter.cc, filter_persistence.cc, and
// source/common/common/token_bucket_impl.cc):
//
//   - one stream per client (Envoy: per RLQS target and domain, shared by
//     its workers), started by the first bucket; the domain on every
//     message;
//   - a new bucket's first request is allowed unless the no-assignment
//     behaviour is DENY_ALL, and reported at once with time_elapsed 0;
//   - every report interval, a report of every bucket (idle ones with
//     zeros), time_elapsed in whole seconds; Envoy's interval is 5 s, fixed
//     in filter_persistence.cc, configurable here for tests
//     (Config.ReportInterval);
//   - a token-bucket assignment equal to the current one (max_tokens,
//     tokens_per_fill, and fill_interval's nanos only) keeps the bucket's
//     state; another starts a new bucket, full, refilling continuously at
//     tokens_per_fill / whole seconds of fill_interval (infinite under
//     1 s), one token per request;
//   - requests_per_time_unit and unset strategies are ignored; abandon
//     erases the bucket (its next request is a new bucket's first);
//   - each assignment restarts its TTL from assignment_time_to_live's whole
//     seconds; on expiry the fallback (expired_assignment_behavior's
//     fallback_rate_limit) applies for its timeout's whole seconds, then
//     the no-assignment behaviour;
//   - a broken stream is reopened only at the next report tick; reports
//     while it is down are dropped after their counters were zeroed.
package rlqsclient

import (
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Config is a client's configuration.
type Config struct {
	// Domain is sent on every report.
	Domain string
	// ReportInterval is the report period; Envoy's is 5 s.
	ReportInterval time.Duration
	// DenyWithoutAssignment: no_assignment_behavior DENY_ALL (else
	// ALLOW_ALL).
	DenyWithoutAssignment bool
	// Fallback is expired_assignment_behavior's fallback_rate_limit, a
	// blanket rule (this client carries no token-bucket fallback), nil for
	// none; FallbackTimeout its expired_assignment_behavior_timeout.
	Fallback        *typev3.RateLimitStrategy
	FallbackTimeout time.Duration
	// Now is the clock of decisions, TTLs and time_elapsed (default
	// time.Now); the report ticks are real time.
	Now func() time.Time
}

// Client is one Envoy's RLQS filter state.
type Client struct {
	conns []*grpc.ClientConn
	cfg   Config

	mu      sync.Mutex
	next    int // the connection the next stream opens on
	buckets map[string]*bucket
	stream  rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel  context.CancelFunc
	started bool

	// counters for tests
	allowed, denied uint64
	streams         int
	reports         int
	dropped         int
	assigned        time.Time

	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

type bucket struct {
	id              map[string]string
	allowed, denied uint64
	lastReport      time.Time
	action          *rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction
	expires         time.Time
	tb              *tokenBucket
	tbShape         [3]int64 // max_tokens, tokens_per_fill, fill nanos: Envoy's equality
}

// New returns a client whose stream opens on conns, one after another
// after each break (a gateway's RLQS cluster of several hosts).
func New(cfg Config, conns ...*grpc.ClientConn) *Client {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, stop := context.WithCancel(context.Background())
	return &Client{conns: conns, cfg: cfg, buckets: map[string]*bucket{}, ctx: ctx, stop: stop}
}

// Close stops the report timer and the stream.
func (c *Client) Close() {
	c.stop()
	c.mu.Lock()
	if c.cancel != nil {
		c.cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}

func key(id map[string]string) string {
	ks := slices.Sorted(maps.Keys(id))
	var b strings.Builder
	for _, k := range ks {
		b.WriteString(strconv.Quote(k) + "=" + strconv.Quote(id[k]) + ";")
	}
	return b.String()
}

// Allow decides one request of bucket id, as the filter does.
func (c *Client) Allow(id map[string]string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	k := key(id)
	b := c.buckets[k]
	if b == nil {
		ok := !c.cfg.DenyWithoutAssignment
		b = &bucket{id: maps.Clone(id), lastReport: now}
		c.count(b, ok)
		c.buckets[k] = b
		if !c.started {
			c.started = true
			c.open()
			c.wg.Add(1)
			go c.tick()
		}
		c.send([]*bucket{b}, now)
		return ok
	}
	ok := c.decide(b, now)
	c.count(b, ok)
	return ok
}

func (c *Client) count(b *bucket, ok bool) {
	if ok {
		b.allowed++
		c.allowed++
	} else {
		b.denied++
		c.denied++
	}
}

// decide is filter.cc's shouldAllowRequest with the expiry rules.
func (c *Client) decide(b *bucket, now time.Time) bool {
	if b.action == nil {
		return !c.cfg.DenyWithoutAssignment
	}
	s := b.action.GetRateLimitStrategy()
	if now.After(b.expires) {
		if c.cfg.Fallback != nil && now.Before(b.expires.Add(time.Duration(int64(c.cfg.FallbackTimeout.Seconds()))*time.Second)) {
			// this client carries a blanket fallback only
			return c.cfg.Fallback.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
		} else {
			return !c.cfg.DenyWithoutAssignment
		}
	}
	switch s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		if b.tb == nil {
			return true
		}
		return b.tb.take(now)
	}
	return true
}

// open starts a stream on the next connection; c.mu held.
func (c *Client) open() {
	if c.ctx.Err() != nil || len(c.conns) == 0 {
		return
	}
	conn := c.conns[c.next%len(c.conns)]
	c.next++
	ctx, cancel := context.WithCancel(c.ctx)
	s, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		cancel()
		return
	}
	c.stream, c.cancel = s, cancel
	c.streams++
	c.wg.Add(1)
	go c.recv(s, cancel)
}

func (c *Client) recv(s rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient, cancel context.CancelFunc) {
	defer c.wg.Done()
	defer cancel()
	for {
		m, err := s.Recv()
		if err != nil {
			c.mu.Lock()
			if c.stream == s { // onRemoteClose: forget the stream
				c.stream = nil
			}
			c.mu.Unlock()
			return
		}
		c.apply(m)
	}
}

// apply is global_client_impl.cc's onQuotaResponseImpl.
func (c *Client) apply(m *rlqsv3.RateLimitQuotaResponse) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	for _, a := range m.GetBucketAction() {
		b := c.buckets[key(a.GetBucketId().GetBucket())]
		if b == nil {
			continue
		}
		if a.GetAbandonAction() != nil {
			delete(c.buckets, key(a.GetBucketId().GetBucket()))
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		if qa == nil {
			continue
		}
		s := qa.GetRateLimitStrategy()
		switch s.GetStrategy().(type) {
		case *typev3.RateLimitStrategy_BlanketRule_:
			b.tb, b.tbShape = nil, [3]int64{}
		case *typev3.RateLimitStrategy_TokenBucket:
			tb := s.GetTokenBucket()
			shape := [3]int64{int64(tb.GetMaxTokens()), int64(tb.GetTokensPerFill().GetValue()), int64(tb.GetFillInterval().GetNanos())}
			if b.tb == nil || shape != b.tbShape {
				b.tb, b.tbShape = newTokenBucket(tb, now), shape
			}
		default:
			continue
		}
		b.action, c.assigned = qa, now
		b.expires = now.Add(time.Duration(qa.GetAssignmentTimeToLive().GetSeconds()) * time.Second)
	}
}

// tick sends the periodic reports, reopening a missing stream first.
func (c *Client) tick() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.ReportInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.mu.Lock()
			now := c.cfg.Now()
			if c.stream == nil {
				c.open()
			}
			bs := make([]*bucket, 0, len(c.buckets))
			for _, b := range c.buckets {
				bs = append(bs, b)
			}
			c.send(bs, now)
			c.mu.Unlock()
		}
	}
}

// send reports bs and zeroes their counters; dropped without a stream.
// c.mu held.
func (c *Client) send(bs []*bucket, now time.Time) {
	m := &rlqsv3.RateLimitQuotaUsageReports{Domain: c.cfg.Domain}
	for _, b := range bs {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqsv3.BucketId{Bucket: b.id},
			TimeElapsed:        &durationpb.Duration{Seconds: int64(now.Sub(b.lastReport) / time.Second)},
			NumRequestsAllowed: b.allowed,
			NumRequestsDenied:  b.denied,
		})
		b.allowed, b.denied, b.lastReport = 0, 0, now
	}
	if c.stream == nil || c.stream.Send(m) != nil {
		c.dropped++
		return
	}
	c.reports++
}

// Stats are a client's counts.
type Stats struct {
	Allowed, Denied uint64
	Streams         int       // streams opened
	Reports         int       // report messages sent
	Dropped         int       // report messages dropped without a stream
	Assigned        time.Time // when the last assignment was applied
}

// Stats returns the client's counts.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Stats{Allowed: c.allowed, Denied: c.denied, Streams: c.streams, Reports: c.reports, Dropped: c.dropped, Assigned: c.assigned}
}

// Assignment is a bucket's current token-bucket assignment, for a bound:
// MaxTokens + TokensPerFill x TTL / FillInterval is the most it can admit
// before its TTL ends. ok is false without a token bucket.
func (c *Client) Assignment(id map[string]string) (maxTokens, perFill int64, fill, ttl time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buckets[key(id)]
	if b == nil || b.action == nil || b.action.GetRateLimitStrategy().GetTokenBucket() == nil {
		return 0, 0, 0, 0, false
	}
	tb := b.action.GetRateLimitStrategy().GetTokenBucket()
	return int64(tb.GetMaxTokens()), int64(tb.GetTokensPerFill().GetValue()), tb.GetFillInterval().AsDuration(), b.action.GetAssignmentTimeToLive().AsDuration(), true
}

// tokenBucket is token_bucket_impl's: starts full, refills continuously.
type tokenBucket struct {
	max, tokens, rate float64
	at                time.Time
}

func newTokenBucket(tb *typev3.TokenBucket, now time.Time) *tokenBucket {
	secs := tb.GetFillInterval().GetSeconds()
	rate := math.Inf(1)
	if secs > 0 {
		rate = float64(tb.GetTokensPerFill().GetValue()) / float64(secs)
	}
	return &tokenBucket{max: float64(tb.GetMaxTokens()), tokens: float64(tb.GetMaxTokens()), rate: rate, at: now}
}

func (t *tokenBucket) take(now time.Time) bool {
	if math.IsInf(t.rate, 1) {
		return true
	}
	t.tokens = min(t.max, t.tokens+t.rate*now.Sub(t.at).Seconds())
	t.at = now
	if t.tokens < 1 {
		return false
	}
	t.tokens--
	return true
}
