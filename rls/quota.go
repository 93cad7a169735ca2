package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// QuotaService is an Envoy rate limit quota service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService, RLQS) over a
// core.Limiter: each gateway enforces a token bucket of its own and
// reports its usage on one stream; the service draws each gateway's
// assignment from the shared bucket of the tenant and class as a
// reservation and divides the bucket's rate among the gateways by their
// reported demand. Register it with
// rlqsv3.RegisterRateLimitQuotaServiceServer beside a Server. It is safe
// for concurrent use; several processes may serve the same buckets.
//
// # Buckets
//
// A bucket ID's entries name the bucket: "tenant" (required) and "class"
// (optional, default quota.DefaultClass), resolved as a check of that
// tenant and class (tier file and overrides, the tenant's default tier).
// A bucket ID with any other entry, an invalid or unknown tenant or class,
// or a class with a concurrency limit is refused: it is assigned
// DENY_ALL for the assignment TTL, and the error handler
// (WithQuotaErrorHandler) receives why. So is a new bucket while the store
// does not answer, until a report finds it answering; an assigned bucket
// keeps what its reservation covers.
//
// # Reservations
//
// Each assignment is a token_bucket (max_tokens b, tokens_per_fill k every
// whole-second fill_interval f) with a whole-second TTL T. Before it is
// sent, the most it can admit before its TTL ends, b + ceil(k*T/f), is
// charged to the shared bucket as a reservation; each usage report's
// allowed count is deducted from the reservation and the difference to
// the next assignment's is charged (one Check) or refunded (one Settle).
// An assignment within 5% of the last one is re-sent identical, so the
// gateway keeps its bucket's state. When the shared bucket cannot give
// the whole reservation, a shortfall of at most half of it is charged as
// a debt (as Settle charges; the refill repays it); a larger one shortens
// the assignment's TTL to what the reservation covers (at least 1 s), or
// assigns the largest bucket it covers (max_tokens 1 and a lower rate),
// or DENY_ALL when it covers less than two requests. A gateway that
// reports no requests for WithIdleReports reports in a row, or sends no
// report for that many TTLs, has the bucket abandoned and its reservation
// refunded; so has every bucket of a stream that ends. A refund never
// lifts the bucket above its capacity.
//
// Every admission is thus charged before it happens (a debt included),
// except the request a gateway admits before its bucket's first
// assignment and the requests admitted after a gateway's last report on
// a stream that ended (whose reservation was refunded): admissions stay
// within capacity + rate x elapsed + the outstanding reservations,
// provided the
// gateways fall back to denying when an assignment expires (Envoy's
// expired_assignment_behavior fallback_rate_limit with a DENY_ALL blanket
// rule, and no_assignment_behavior DENY_ALL after it).
//
// # Fair division
//
// Each gateway's demand (allowed + denied requests per second of its last
// report) is kept in a small Redis hash per bucket, with a TTL, so every
// process serving the bucket sees every gateway's. The rate is divided
// max-min fair among the demands; what the demands leave is shared
// equally. A gateway's max_tokens is one second of its rate, or its share
// of a quarter of what the capacity holds beyond rate x (TTL + 1 s),
// whichever is larger. The reservations must fit in the bucket: with a
// capacity below about twice rate x (TTL + 1 s) the bound still holds,
// but the gateways that report last in a period fall short of their
// shares.
type QuotaService struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	lim *core.Limiter
	rdb redis.UniversalClient
	cfg quotaConfig

	mu      sync.Mutex
	closed  bool
	closing chan struct{} // closed by Close
	streams sync.WaitGroup
}

// QuotaOption configures a QuotaService. A nil one is skipped; one given
// a value it cannot use makes NewQuotaService fail with an error naming it
// and wrapping core.ErrInvalidConfig.
type QuotaOption interface{ applyQuota(*quotaConfig) error }

type quotaOptionFunc func(*quotaConfig) error

func (f quotaOptionFunc) applyQuota(c *quotaConfig) error { return f(c) }

type quotaConfig struct {
	ttl     time.Duration
	idle    int
	onError ErrorHandler
}

// DefaultAssignmentTTL is the assignment TTL without WithAssignmentTTL:
// Envoy's report interval, 5 s, and one second for the report's way.
const DefaultAssignmentTTL = 6 * time.Second

// WithAssignmentTTL sets the TTL of every assignment, a whole number of
// seconds from 1 s to 1 h; set it a second or more above the gateways'
// report interval, or assignments expire between reports. A longer TTL
// reserves more of the bucket for each gateway. Default
// DefaultAssignmentTTL.
func WithAssignmentTTL(ttl time.Duration) QuotaOption {
	return quotaOptionFunc(func(c *quotaConfig) error {
		if ttl < time.Second || ttl > time.Hour || ttl%time.Second != 0 {
			return badOption("WithAssignmentTTL", "want whole seconds from 1s to 1h, got %v", ttl)
		}
		c.ttl = ttl
		return nil
	})
}

// WithIdleReports sets after how many reports in a row without a request
// (or how many TTLs without a report) a gateway's bucket is abandoned and
// its reservation refunded: 1 to 100, default 3.
func WithIdleReports(n int) QuotaOption {
	return quotaOptionFunc(func(c *quotaConfig) error {
		if n < 1 || n > 100 {
			return badOption("WithIdleReports", "want 1 to 100, got %d", n)
		}
		c.idle = n
		return nil
	})
}

// WithQuotaErrorHandler sets the hook that receives why a bucket was
// refused, and the limiter's and the demand store's errors. nil is an
// error (leave the option out instead).
func WithQuotaErrorHandler(h ErrorHandler) QuotaOption {
	return quotaOptionFunc(func(c *quotaConfig) error { return setHandler(&c.onError, "WithQuotaErrorHandler", h) })
}

// NewQuotaService returns a QuotaService drawing from lim's buckets and
// keeping the gateways' demand in rdb (the limiter's Redis, or any other
// that every process serving the buckets shares), or an error naming a
// bad option.
func NewQuotaService(lim *core.Limiter, rdb redis.UniversalClient, opts ...QuotaOption) (*QuotaService, error) {
	if lim == nil || rdb == nil {
		return nil, fmt.Errorf("%w: rls: NewQuotaService needs a limiter and a Redis client", core.ErrInvalidConfig)
	}
	c := quotaConfig{ttl: DefaultAssignmentTTL, idle: 3}
	for _, o := range opts {
		if o != nil {
			if err := o.applyQuota(&c); err != nil {
				return nil, err
			}
		}
	}
	return &QuotaService{lim: lim, rdb: rdb, cfg: c, closing: make(chan struct{})}, nil
}

// Close ends every stream, refunding its reservations, and refuses new
// ones (Unavailable): the gateways open their streams on another process
// at their next report. Call it before the gRPC server's GracefulStop,
// which would otherwise wait on the streams, and before the limiter is
// closed. It returns when every stream has ended.
func (s *QuotaService) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.streams.Wait()
}

// quotaBucket is one bucket of one stream.
type quotaBucket struct {
	id      *rlqsv3.BucketId
	tenant  quota.Tenant
	class   string
	refused error
	// transient: refused because the store did not answer; the next
	// report asks again
	transient bool
	demand    string // the demand hash's key

	// tmpl is a store admission of the bucket's buckets (valid when have):
	// refunds settle a copy of it
	tmpl core.Decision
	have bool
	q    quota.Quota // the quota divided: the tightest of the class's buckets

	out        int64 // tokens reserved and not yet reported used
	sent       *typev3.RateLimitStrategy
	idle       int         // reports in a row without a request
	seen       time.Time   // last report
	demandRate float64     // requests per second asked for
	shape      bucketShape // the last token bucket assigned
	asked      uint64      // requests asked for since since
	since      time.Time
}

// minDemandWindow is the shortest time a demand is measured over.
const minDemandWindow = 500 * time.Millisecond

// StreamRateLimitQuotas serves one gateway's stream: each usage report is
// answered by one response with an action for every bucket it names.
func (s *QuotaService) StreamRateLimitQuotas(stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errClosing
	}
	s.streams.Add(1)
	s.mu.Unlock()
	defer s.streams.Done()
	ctx := stream.Context()
	st := &quotaStream{s: s, id: newStreamID(), buckets: map[string]*quotaBucket{}}
	defer st.end()
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(s.cfg.ttl)
	defer tick.Stop()
	for {
		var res *rlqsv3.RateLimitQuotaResponse
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return errClosing
		case err := <-recvErr:
			if errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case m := <-reports:
			res = st.report(ctx, m)
		case now := <-tick.C:
			res = st.sweep(ctx, now)
		}
		if len(res.GetBucketAction()) > 0 {
			if err := stream.Send(res); err != nil {
				return err
			}
		}
	}
}

var errClosing = status.Error(codes.Unavailable, "tollgate: the quota service is shutting down")

func newStreamID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// quotaStream is one stream's buckets; only its goroutine uses it.
type quotaStream struct {
	s       *QuotaService
	id      string
	buckets map[string]*quotaBucket
}

// bucketKey is a bucket ID's map key: its entries, sorted.
func bucketKey(id *rlqsv3.BucketId) string {
	m := id.GetBucket()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(strconv.Quote(k))
		b.WriteByte('=')
		b.WriteString(strconv.Quote(m[k]))
		b.WriteByte(';')
	}
	return b.String()
}

func (st *quotaStream) report(ctx context.Context, m *rlqsv3.RateLimitQuotaUsageReports) *rlqsv3.RateLimitQuotaResponse {
	res := &rlqsv3.RateLimitQuotaResponse{}
	now := time.Now()
	for _, u := range m.GetBucketQuotaUsages() {
		key := bucketKey(u.GetBucketId())
		b := st.buckets[key]
		first := b == nil
		if first {
			b = st.open(ctx, u.GetBucketId())
			st.buckets[key] = b
		}
		// demand is measured by this process's clock (a report's
		// time_elapsed is whole seconds) over half a second at least; a
		// bucket new to the stream has only its report's time_elapsed
		if first {
			b.since = now.Add(-u.GetTimeElapsed().AsDuration())
		}
		b.seen = now
		if b.refused != nil {
			res.BucketAction = append(res.BucketAction, st.assign(b, deny(), int64(st.s.cfg.ttl/time.Second)))
			if b.transient {
				delete(st.buckets, key)
			}
			continue
		}
		allowed := int64(min(u.GetNumRequestsAllowed(), quota.MaxCost))
		asked := u.GetNumRequestsAllowed() + u.GetNumRequestsDenied()
		b.out -= allowed
		if asked == 0 && !first {
			b.idle++
		} else {
			b.idle = 0
		}
		if b.idle >= st.s.cfg.idle {
			res.BucketAction = append(res.BucketAction, st.abandon(ctx, b))
			delete(st.buckets, key)
			continue
		}
		// until its demand is measured, a bucket asks for the whole rate
		b.asked += asked
		if w := now.Sub(b.since); w >= minDemandWindow {
			b.demandRate = float64(b.asked) / w.Seconds()
			b.asked, b.since = 0, now
		} else if first {
			b.demandRate = b.q.RefillPerSecond
		}
		strategy, life := st.reserve(ctx, b, st.share(ctx, b, b.demandRate))
		res.BucketAction = append(res.BucketAction, st.assign(b, strategy, life))
	}
	return res
}

// open reads a new bucket ID: its tenant and class, and the quota to
// divide (one peek).
func (st *quotaStream) open(ctx context.Context, id *rlqsv3.BucketId) *quotaBucket {
	b := &quotaBucket{id: id, class: quota.DefaultClass}
	var hasTenant bool
	for k, v := range id.GetBucket() {
		switch k {
		case KeyTenant:
			b.tenant.ID, hasTenant = v, true
		case KeyClass:
			b.class = v
		default:
			b.refused = fmt.Errorf("entry %q: a bucket ID may have only the entries %q and %q", k, KeyTenant, KeyClass)
		}
	}
	if b.refused == nil && !hasTenant {
		b.refused = fmt.Errorf("no %q entry", KeyTenant)
	}
	if b.refused == nil {
		b.refused = quota.ValidateName(b.class)
	}
	if b.refused == nil {
		b.demand, b.refused = st.s.lim.Keys().Demand(b.tenant.ID, b.class)
	}
	if b.refused == nil {
		d, err := st.s.lim.Peek(ctx, b.tenant, b.class)
		switch {
		case d.Reason == core.ReasonInvalid || d.Reason == core.ReasonUnresolved:
			b.refused = fmt.Errorf("no quota: %w", err)
		case len(d.Buckets) == 0:
			b.refused = fmt.Errorf("the store did not answer: %w", err)
			b.transient = true // asked again at the next report
		default:
			for _, bs := range d.Buckets {
				if bs.Quota.Concurrency > 0 {
					b.refused = fmt.Errorf("bucket %q has a concurrency limit, which a quota assignment cannot carry", bs.Name)
				}
			}
			b.q = divided(d)
		}
	}
	if b.refused != nil {
		b.refused = fmt.Errorf("rls: quota bucket %v refused: %w", id.GetBucket(), b.refused)
		st.s.report(ctx, b.refused)
	}
	return b
}

func (s *QuotaService) report(ctx context.Context, err error) {
	if err != nil && s.cfg.onError != nil {
		s.cfg.onError(ctx, err)
	}
}

// divided is the quota divided among the gateways for d's buckets: the
// lowest rate and the lowest capacity among them (a class bucket and its
// tenant-wide ceiling).
func divided(d core.Decision) quota.Quota {
	var q quota.Quota
	for i, bs := range d.Buckets {
		if i == 0 || bs.Quota.RefillPerSecond < q.RefillPerSecond {
			q.RefillPerSecond = bs.Quota.RefillPerSecond
		}
		if i == 0 || bs.Quota.Capacity < q.Capacity {
			q.Capacity = bs.Quota.Capacity
		}
	}
	return q
}

// share writes b's demand to the bucket's demand hash and returns b's
// max-min fair share of the rate among the demands there. A record older
// than three TTLs is ignored.
func (st *quotaStream) share(ctx context.Context, b *quotaBucket, demand float64) float64 {
	ttl := st.s.cfg.ttl
	now := time.Now()
	cctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	var all *redis.MapStringStringCmd
	_, err := st.s.rdb.Pipelined(cctx, func(p redis.Pipeliner) error {
		p.HSet(cctx, b.demand, st.id, strconv.FormatFloat(demand, 'g', 6, 64)+" "+strconv.FormatInt(now.UnixMilli(), 10))
		p.PExpire(cctx, b.demand, 3*ttl)
		all = p.HGetAll(cctx, b.demand)
		return nil
	})
	if err != nil {
		st.s.report(ctx, fmt.Errorf("rls: demand of %q: %w", b.demand, err))
		return fairShare(b.q.RefillPerSecond, []float64{demand}, 0)
	}
	demands := []float64{demand}
	for field, v := range all.Val() {
		if field == st.id {
			continue
		}
		d, at, ok := strings.Cut(v, " ")
		df, err1 := strconv.ParseFloat(d, 64)
		ms, err2 := strconv.ParseInt(at, 10, 64)
		if !ok || err1 != nil || err2 != nil || df < 0 || math.IsNaN(df) || now.Sub(time.UnixMilli(ms)) > 3*ttl {
			continue
		}
		demands = append(demands, df)
	}
	return fairShare(b.q.RefillPerSecond, demands, 0)
}

// fairShare is demands[i]'s max-min fair share of rate: water-filling,
// then what the demands leave shared equally.
func fairShare(rate float64, demands []float64, i int) float64 {
	n := len(demands)
	order := make([]int, n)
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int {
		if demands[a] < demands[b] {
			return -1
		}
		if demands[a] > demands[b] {
			return 1
		}
		return 0
	})
	left := rate
	var mine float64
	for k, j := range order {
		a := min(demands[j], left/float64(n-k))
		left -= a
		if j == i {
			mine = a
		}
	}
	return mine + max(left, 0)/float64(n)
}

// bucketShape is a token-bucket assignment: max_tokens, tokens_per_fill
// every fill seconds.
type bucketShape struct {
	burst, tokens, fill int64
}

// maxFill is the longest fill interval assigned, in seconds.
const maxFill = 60

// shape quantizes a rate share (per second) and a burst.
func shape(rate float64, burst int64) bucketShape {
	var s bucketShape
	if rate >= 1 {
		s.tokens, s.fill = int64(rate), 1
	} else {
		s.tokens, s.fill = 1, maxFill
		if rate > 0 {
			s.fill = min(int64(math.Ceil(1/rate)), maxFill)
		}
	}
	s.burst = max(burst, s.tokens, 1)
	return s
}

// need is the most s can admit in ttl seconds, full at the start.
func (s bucketShape) need(ttl int64) int64 {
	return s.burst + (s.tokens*ttl+s.fill-1)/s.fill
}

// fit is the largest shape with max_tokens 1, no faster than want, that
// out tokens cover in ttl seconds, or false when they cover less than two
// requests.
func fit(out, ttl int64, want bucketShape) (bucketShape, bool) {
	if out < 2 {
		return bucketShape{}, false
	}
	if out-1 >= ttl && want.fill == 1 {
		return bucketShape{burst: 1, tokens: min((out-1)/ttl, want.tokens), fill: 1}, true
	}
	f := max(min((ttl+out-2)/(out-1), maxFill), want.fill) // ceil(ttl / (out-1))
	s := bucketShape{burst: 1, tokens: 1, fill: f}
	for s.need(ttl) > out && s.fill < maxFill {
		s.fill++
	}
	return s, s.need(ttl) <= out
}

// reserve brings b's reservation to what its share's assignment can admit
// before its TTL ends, charging or refunding the difference, and returns
// the assignment the reservation covers.
func (st *quotaStream) reserve(ctx context.Context, b *quotaBucket, share float64) (*typev3.RateLimitStrategy, int64) {
	ttl := int64(st.s.cfg.ttl / time.Second)
	r, c := b.q.RefillPerSecond, float64(b.q.Capacity)
	// the burst: the gateway's share of a quarter of what the capacity
	// holds beyond rate x (TTL + 1 s), at least one fill (shape); the
	// rest is headroom for the bursts replaced buckets start with
	spare := max(c-math.Ceil(r*float64(ttl+1)), 0) / 4
	var burst int64
	if r > 0 {
		burst = int64(spare * share / r)
	}
	want := shape(share, burst)
	// a shape within 5% of the last one sent stays: an assignment re-sent
	// identical keeps the gateway's bucket, a changed one starts full
	if last := b.shape; last.fill == want.fill && last.fill > 0 &&
		math.Abs(float64(want.tokens-last.tokens)) <= max(1, 0.05*float64(last.tokens)) &&
		math.Abs(float64(want.burst-last.burst)) <= max(1, 0.05*float64(last.burst)) {
		want = last
	}
	target := min(want.need(ttl), b.q.Capacity)
	if delta := target - b.out; delta > 0 {
		// a shortfall of up to half the reservation is owed rather than
		// cut: a debt the refill repays
		b.out += st.draw(ctx, b, min(delta, b.q.Capacity), target/2)
	} else if delta < 0 {
		st.refund(ctx, b, -delta)
		b.out = target
	}
	if b.out < 0 { // used beyond its reservation: a debt on the bucket
		st.charge(ctx, b, -b.out)
		b.out = 0
	}
	got, life := want, ttl
	if b.out < want.need(ttl) {
		// short: the same bucket for a shorter life when the reservation
		// covers a second of it (re-sent identical, the gateway keeps its
		// bucket's state, and denies from the expiry to its next report),
		// else the largest bucket it covers, else deny
		for life = ttl - 1; life >= 1 && want.need(life) > b.out; life-- {
		}
		if life < 1 {
			var ok bool
			life = ttl
			if got, ok = fit(b.out, ttl, want); !ok {
				st.refund(ctx, b, b.out)
				b.out = 0
				b.shape = bucketShape{}
				return deny(), ttl
			}
		}
	}
	if extra := b.out - got.need(life); extra > 0 {
		st.refund(ctx, b, extra)
		b.out -= extra
	}
	b.shape = got
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(got.burst, math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(uint32(min(got.tokens, math.MaxUint32))),
		FillInterval:  durationpb.New(time.Duration(got.fill) * time.Second),
	}}}, life
}

// draw charges up to n tokens of b's buckets and returns how many: n, or
// when the buckets hold fewer, n all the same when they lack no more than
// owe (charged as a debt, as a settle charges: the gateway keeps its
// assignment rather than its bucket being replaced), else what they hold
// (a second check).
func (st *quotaStream) draw(ctx context.Context, b *quotaBucket, n, owe int64) int64 {
	d, err := st.s.lim.Check(ctx, core.Request{Tenant: b.tenant, Class: b.class, Cost: n})
	if d.Settleable() {
		b.tmpl, b.have, b.q = d, true, divided(d) // a quota changed since shows here
		return n
	}
	st.s.report(ctx, err)
	if d.Reason != core.ReasonOverLimit || len(d.Buckets) == 0 {
		return 0
	}
	least := math.Inf(1)
	for _, bs := range d.Buckets {
		least = min(least, bs.Tokens)
	}
	m := int64(math.Floor(least))
	if b.have && n-max(m, 0) <= owe {
		if st.charge(ctx, b, n) {
			return n
		}
		return 0
	}
	if m < 1 || m >= n {
		return 0
	}
	d, err = st.s.lim.Check(ctx, core.Request{Tenant: b.tenant, Class: b.class, Cost: m})
	if d.Settleable() {
		b.tmpl, b.have = d, true
		return m
	}
	st.s.report(ctx, err)
	return 0
}

// refund returns n reserved tokens to b's buckets.
func (st *quotaStream) refund(ctx context.Context, b *quotaBucket, n int64) {
	if n <= 0 || !b.have {
		return
	}
	d := b.tmpl
	d.Cost = min(n, quota.MaxCost)
	_, err := st.s.lim.Settle(ctx, b.tenant, d, 0)
	st.s.report(ctx, err)
}

// charge takes n tokens from b's buckets whatever they hold (a debt), and
// reports whether it did.
func (st *quotaStream) charge(ctx context.Context, b *quotaBucket, n int64) bool {
	if n <= 0 || !b.have {
		return false
	}
	d := b.tmpl
	d.Cost = 1
	_, err := st.s.lim.Settle(ctx, b.tenant, d, min(1+n, quota.MaxCost))
	st.s.report(ctx, err)
	return err == nil
}

func deny() *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
}

// assign is b's assignment action for strategy: the last one sent when
// equal (so the gateway keeps its bucket's state).
func (st *quotaStream) assign(b *quotaBucket, strategy *typev3.RateLimitStrategy, ttl int64) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	if b.sent == nil || !proto.Equal(b.sent, strategy) {
		b.sent = strategy
	}
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: &durationpb.Duration{Seconds: ttl},
			RateLimitStrategy:    b.sent,
		}},
	}
}

// abandon refunds b's reservation, forgets its demand and returns the
// abandon action.
func (st *quotaStream) abandon(ctx context.Context, b *quotaBucket) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	st.release(ctx, b)
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId:     b.id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
	}
}

// release refunds b's reservation and deletes its demand record.
func (st *quotaStream) release(ctx context.Context, b *quotaBucket) {
	if b.refused != nil {
		return
	}
	st.refund(ctx, b, b.out)
	b.out = 0
	cctx, cancel := context.WithTimeout(ctx, st.s.cfg.ttl)
	defer cancel()
	if err := st.s.rdb.HDel(cctx, b.demand, st.id).Err(); err != nil {
		st.s.report(ctx, fmt.Errorf("rls: demand of %q: %w", b.demand, err))
	}
}

// sweep abandons the buckets not reported for the idle count of TTLs.
func (st *quotaStream) sweep(ctx context.Context, now time.Time) *rlqsv3.RateLimitQuotaResponse {
	res := &rlqsv3.RateLimitQuotaResponse{}
	for key, b := range st.buckets {
		if now.Sub(b.seen) >= time.Duration(st.s.cfg.idle)*st.s.cfg.ttl {
			res.BucketAction = append(res.BucketAction, st.abandon(ctx, b))
			delete(st.buckets, key)
		}
	}
	return res
}

// end refunds every reservation of the stream.
func (st *quotaStream) end() {
	ctx, cancel := context.WithTimeout(context.Background(), st.s.cfg.ttl)
	defer cancel()
	for _, b := range st.buckets {
		st.release(ctx, b)
	}
}
