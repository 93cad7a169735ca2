package rls

import (
	"context"
	"slices"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// holder keeps the concurrency slots this process's hits took (WithSlotHold)
// until a negative hit or the hold time frees each: core renews them
// meanwhile.
type holder struct {
	mu sync.Mutex
	by map[heldKey][]*heldSlot // oldest first
	// owed: hits of a tenant's class that charged nothing (denied), whose
	// negative hits Envoy still sends when their streams end
	owed map[owedKey]owed
}

// owedKey is a tenant's class.
type owedKey struct{ tenant, class string }

// owed is the negative hits a class's uncharged hits are owed, until: a
// denied request's stream ends at once (its 429), so its negative hit
// comes right after; one not come by then is not awaited.
type owed struct {
	n     int
	until time.Time
}

// owedLife is how long an uncharged hit's negative hit is awaited.
const owedLife = 5 * time.Second

// maxOwedKeys bounds the classes with negative hits owed before the
// expired ones are swept.
const maxOwedKeys = 4096

// owe notes that tenant t's hit of each of classes charged nothing: their
// negative hits will free and refund nothing.
func (hd *holder) owe(t quota.Tenant, classes []string) {
	now := time.Now()
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.owed == nil {
		hd.owed = map[owedKey]owed{}
	}
	if len(hd.owed) >= maxOwedKeys {
		for k, o := range hd.owed {
			if !now.Before(o.until) {
				delete(hd.owed, k)
			}
		}
	}
	for _, c := range classes {
		k := owedKey{t.ID, c}
		o := hd.owed[k]
		if !now.Before(o.until) {
			o.n = 0
		}
		hd.owed[k] = owed{n: o.n + 1, until: now.Add(owedLife)}
	}
}

// paid reports whether a negative hit of tenant t's class pays one owed
// by an uncharged hit (and so does nothing else).
func (hd *holder) paid(t quota.Tenant, class string) bool {
	k := owedKey{t.ID, class}
	hd.mu.Lock()
	defer hd.mu.Unlock()
	o, ok := hd.owed[k]
	if !ok {
		return false
	}
	if !time.Now().Before(o.until) || o.n <= 0 {
		delete(hd.owed, k)
		return false
	}
	if o.n == 1 {
		delete(hd.owed, k)
	} else {
		hd.owed[k] = owed{n: o.n - 1, until: o.until}
	}
	return true
}

// heldKey is a tenant's bucket with a concurrency limit.
type heldKey struct{ tenant, bucket string }

type heldSlot struct {
	slot  *core.Slot
	timer *time.Timer
}

// hold keeps the slot d took for tenant t (nil: none) until a negative
// hit frees it or the hold time runs out; without WithSlotHold it is freed
// at once.
func (s *Server) hold(t quota.Tenant, d core.Decision) {
	if d.Slot == nil {
		return
	}
	b := concurrencyBucket(d.Buckets)
	if s.cfg.maxHold == 0 || b == "" {
		d.Slot.Release()
		return
	}
	k, h := heldKey{t.ID, b}, &heldSlot{slot: d.Slot}
	hd := &s.held
	hd.mu.Lock()
	defer hd.mu.Unlock()
	if hd.by == nil {
		hd.by = map[heldKey][]*heldSlot{}
	}
	hd.by[k] = append(hd.by[k], h)
	h.timer = time.AfterFunc(s.cfg.maxHold, func() {
		if hd.drop(k, h) {
			h.slot.Release()
		}
	})
}

// drop removes h from k's slots, reporting whether it was there.
func (hd *holder) drop(k heldKey, h *heldSlot) bool {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	i := slices.Index(hd.by[k], h)
	if i < 0 {
		return false
	}
	hd.by[k] = slices.Delete(hd.by[k], i, i+1)
	if len(hd.by[k]) == 0 {
		delete(hd.by, k)
	}
	return true
}

// take removes and returns the oldest slot held for k, or nil.
func (hd *holder) take(k heldKey) *core.Slot {
	hd.mu.Lock()
	defer hd.mu.Unlock()
	hs := hd.by[k]
	if len(hs) == 0 {
		return nil
	}
	h := hs[0]
	h.timer.Stop()
	if len(hs) == 1 {
		delete(hd.by, k)
	} else {
		hd.by[k] = hs[1:]
	}
	return h.slot
}

// settled notes what a hit of group g took: its slot held (hold), or, when
// it charged nothing (denied, failed open, shadowed), the negative hits
// owed to its classes.
func (s *Server) settled(g *group) {
	if g.d.Reason != core.ReasonOK {
		s.held.owe(g.tenant, g.classes)
		return
	}
	s.hold(g.tenant, g.d)
}

// concurrencyBucket names the bucket with a concurrency limit among bs, or
// "".
func concurrencyBucket(bs []core.BucketState) string {
	for _, b := range bs {
		if b.Quota.Concurrency > 0 {
			return b.Name
		}
	}
	return ""
}

// negative answers a negative hit (is_negative_hits) of tenant t's class
// at cost: for a class with a concurrency limit, under WithSlotHold, it
// frees one slot of the tenant's bucket (the oldest this process holds,
// else one another process of the slot group holds: core.Limiter.ReleaseAny)
// and refunds no token (the request ran); for any other class it refunds
// cost tokens to the class's buckets, never above their capacity. It is
// answered OK whatever happened: Envoy reads nothing from it.
//
// rule is the buckets a rule of the configuration gives class (nil: the
// limiter's resolver answers it), passed as data as a hit's are.
func (s *Server) negative(ctx context.Context, t quota.Tenant, class string, cost int64, rule []quota.Bucket) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if cost == 0 || s.held.paid(t, class) {
		return st // a peek's or a denied hit's: it charged nothing and took no slot
	}
	req := core.Request{Tenant: t, Class: class}
	if rule != nil {
		req.Resolved = [][]quota.Bucket{rule}
	}
	d, err := s.lim.Check(ctx, req)
	if err != nil {
		s.failed(ctx, err)
		return st
	}
	if b := concurrencyBucket(d.Buckets); b != "" {
		if s.cfg.maxHold > 0 {
			_, err = s.lim.ReleaseAny(ctx, t, class, s.held.take(heldKey{t.ID, b}))
		}
	} else {
		// the peek is the refund's reservation: its buckets, charged cost,
		// settled at 0
		d.Cost = cost
		_, err = s.lim.Settle(ctx, t, d, 0)
	}
	if err != nil {
		s.failed(ctx, err)
	}
	return st
}

func (s *Server) failed(ctx context.Context, err error) {
	if s.cfg.onError != nil {
		s.cfg.onError(ctx, err)
	}
}
