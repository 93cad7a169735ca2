// Package lease holds this replica's token leases: per bucket set (tenant
// and class), tokens taken from the store as one charge of the lease's
// size, spent locally until they run out or the lease expires.
//
// A lease is sized by demand and by the bucket's level: the next lease of a
// bucket set is this replica's demand for it (the cost asked per second,
// measured since its last lease, or over at most the TTL while it takes
// none) times the TTL, at least 2, at most the class's size and at most
// Fraction of the balance the store last reported for its buckets (plus
// their refill since). A bucket set's first check, a check whose lease
// would serve itself alone (demand of at most 1 per TTL), and a check
// whose lease would come to under 2 tokens or under its cost are plain,
// and the reply's balances are remembered. So a quiet tenant's checks are
// plain or take small leases, a hot one's take the class's size, and near
// an empty bucket every check is a plain one.
//
// The map is bounded. At the bound it drops leases that have expired
// (their unspent tokens are lost by design then); it never drops a live
// lease, whose unspent tokens its tenant has paid for. When every entry is
// live, a check that finds no lease of its own is a plain check: it takes
// no lease until one expires.
package lease

import (
	"math"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// Class is one class's lease setting: Size is the largest lease.
type Class struct {
	Size int64
	TTL  time.Duration
}

// Fraction is the most of the store's last reported balance one lease
// takes.
const Fraction = 0.5

// Map is the leases of one limiter.
type Map struct {
	classes map[string]Class
	mu      sync.Mutex
	entries map[string]*Lease // by the first bucket key
	max     int
	// noneBefore: no lease in the map expires before it (a sweep found
	// none); until then a full map is not swept again
	noneBefore time.Time
}

// Lease is one bucket set's lease.
type Lease struct {
	keys    []string
	quotas  []quota.Quota // the buckets' quotas when the lease was charged
	base    []float64     // the store's balances after the lease was charged
	tokens  int64         // unspent
	expires time.Time
	at      time.Time // when base was reported (zero: never)
	// demand: the cost asked of this bucket set since since (the last
	// lease's start, or the start of the measurement while none is taken)
	asked int64
	since time.Time
	// acquiring is non-nil while one check takes a new lease from the store;
	// it is done when that check is.
	acquiring *Acquisition
}

// Acquisition is one check taking a lease; the checks that wait for it
// learn its store failure, if any, with it.
type Acquisition struct {
	done chan struct{}
	err  error // set before done is closed: the acquirer's store failure
}

// Done is closed when the acquisition ended.
func (a *Acquisition) Done() <-chan struct{} { return a.done }

// Err is the acquirer's store failure, once Done is closed; nil if none.
func (a *Acquisition) Err() error { return a.err }

// New returns an empty map of the classes' leases, bounded to max entries.
func New(classes map[string]Class, max int) *Map {
	return &Map{classes: classes, entries: map[string]*Lease{}, max: max}
}

// Class returns the lease setting of a class, if it has one.
func (m *Map) Class(name string) (Class, bool) {
	c, ok := m.classes[name]
	return c, ok
}

// Spend takes cost tokens from a live lease for keys (quota(i) is bucket
// i's quota now) and returns each bucket's balance as the lease states it:
// the store's after the lease plus the lease's unspent tokens. Otherwise,
// with ask's size above 0 (the check's first Spend, with the largest lease
// it could take and the class's TTL: its cost counts as demand), when no
// check is taking a lease for keys and demand and balance call for one, it
// marks the caller as the one who takes it (acquiring: the caller must
// charge size and call Release); when another check is taking one, it
// returns that acquisition to wait on. With none of these
// (ask zero, a full map of live leases, or no lease called for) the
// caller makes a plain check, and tells Observe its reply.
func (m *Map) Spend(keys []string, quotaOf func(i int) quota.Quota, cost int64, now time.Time, ask Class) (tokens []float64, ok bool, wait *Acquisition, acquiring *Lease, size int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[keys[0]]
	if e != nil && !e.matches(keys, quotaOf) {
		// another bucket set or a changed quota: the lease proves nothing
		if e.acquiring != nil {
			return nil, false, e.acquiring, nil, 0
		}
		delete(m.entries, keys[0])
		e = nil
	}
	if e != nil && ask.Size > 0 {
		e.asked += cost
	}
	if e != nil && e.base != nil && e.tokens >= cost && now.Before(e.expires) {
		e.tokens -= cost
		tokens = make([]float64, len(e.base))
		for i, b := range e.base {
			tokens[i] = b + float64(e.tokens)
		}
		return tokens, true, nil, nil, 0
	}
	if e != nil && e.acquiring != nil {
		return nil, false, e.acquiring, nil, 0
	}
	if ask.Size <= 0 {
		return nil, false, nil, nil, 0
	}
	if e == nil {
		if len(m.entries) >= m.max && !m.sweep(now) {
			return nil, false, nil, nil, 0 // every lease is live: none is burned
		}
		// first seen: no demand known yet, a plain check
		m.entries[keys[0]] = &Lease{keys: keys, asked: cost, since: now}
		return nil, false, nil, nil, 0
	}
	size = e.next(quotaOf, cost, now, ask)
	if size < 2 || size < cost {
		// no lease: demand or the balance is too low. The measurement
		// restarts once it spans the TTL
		if now.Sub(e.since) >= ask.TTL {
			e.asked, e.since = cost, now
		}
		return nil, false, nil, nil, 0
	}
	e.asked, e.since = cost, now
	e.acquiring = &Acquisition{done: make(chan struct{})}
	return nil, false, nil, e, size
}

// next is the size of e's next lease: demand (asked before this check,
// since since) times ask's TTL, rounded, at least 2 (none when at most
// 1: the lease would serve this check alone), at most ask's size and
// Fraction of each bucket's last reported balance plus its refill since.
// Callers hold mu.
func (e *Lease) next(quotaOf func(i int) quota.Quota, cost int64, now time.Time, ask Class) int64 {
	want := float64(ask.Size)
	if dt := now.Sub(e.since); dt > 0 {
		use := float64(e.asked-cost) * ask.TTL.Seconds() / dt.Seconds()
		if use <= 1 {
			return 0 // the lease would serve this check alone
		}
		want = min(want, max(2, math.Round(use)))
	}
	if e.base != nil {
		elapsed := max(now.Sub(e.at).Seconds(), 0)
		for i, b := range e.base {
			q := quotaOf(i)
			level := min(b+q.RefillPerSecond*elapsed, float64(q.Capacity))
			want = min(want, Fraction*level)
		}
	}
	return int64(math.Floor(max(want, 0)))
}

// sweep drops the expired leases of a full map and reports whether it made
// room. A sweep that finds none remembers the earliest expiry, so a full
// map of live leases is not swept on every check. Callers hold mu.
func (m *Map) sweep(now time.Time) bool {
	if now.Before(m.noneBefore) {
		return false
	}
	var earliest time.Time
	for k, e := range m.entries {
		switch {
		case e.acquiring != nil:
			continue
		case !now.Before(e.expires):
			delete(m.entries, k)
		case earliest.IsZero() || e.expires.Before(earliest):
			earliest = e.expires
		}
	}
	if len(m.entries) < m.max {
		return true
	}
	if earliest.IsZero() {
		earliest = now.Add(time.Millisecond) // only acquisitions: they end soon
	}
	m.noneBefore = earliest
	return false
}

// Release ends the acquisition of e (from Spend): its waiters are released
// whatever happened to the map meanwhile (a Forget), and learn failure, the
// acquirer's store failure if any. With granted balances base (the store's
// after it charged the lease at time at, of buckets of quotas), the lease
// holds unspent tokens until expires, if it is still the map's; with none
// (nil) it holds none, and the check tells Observe its plain reply.
func (m *Map) Release(e *Lease, quotas []quota.Quota, base []float64, unspent int64, at, expires time.Time, failure error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := e.acquiring; a != nil {
		a.err = failure
		close(a.done)
		e.acquiring = nil
	}
	if m.entries[e.keys[0]] != e {
		return
	}
	if base == nil {
		e.tokens, e.expires = 0, time.Time{}
		return
	}
	e.quotas, e.base, e.tokens, e.at, e.expires = quotas, base, unspent, at, expires
	if expires.Before(m.noneBefore) {
		m.noneBefore = expires
	}
}

// Observe remembers the balances the store reported at time at for keys'
// buckets in reply to a plain check, unless a lease of keys is live or
// being taken (its balances stand).
func (m *Map) Observe(keys []string, buckets []stack.Bucket, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[keys[0]]
	if e == nil || e.acquiring != nil || (e.tokens > 0 && at.Before(e.expires)) || len(e.keys) != len(keys) || len(buckets) != len(keys) {
		return
	}
	for i := range keys {
		if e.keys[i] != keys[i] {
			return
		}
	}
	if len(e.base) != len(keys) {
		// a spend copies the balances out under mu: these can be reused
		e.quotas, e.base = make([]quota.Quota, len(keys)), make([]float64, len(keys))
	}
	for i, b := range buckets {
		e.quotas[i], e.base[i] = b.Quota, b.Tokens
	}
	e.tokens, e.at, e.expires = 0, at, time.Time{}
}

func (e *Lease) matches(keys []string, quotaOf func(i int) quota.Quota) bool {
	if len(e.keys) != len(keys) || (e.base != nil && len(e.base) != len(keys)) {
		return false
	}
	for i := range keys {
		if e.keys[i] != keys[i] || (e.base != nil && e.quotas[i] != quotaOf(i)) {
			return false
		}
	}
	return true
}

// Forget drops the leases whose first key begins with prefix (a tenant's
// Reset), except those being acquired.
func (m *Map) Forget(prefix string) {
	m.mu.Lock()
	for k, e := range m.entries {
		if strings.HasPrefix(k, prefix) && e.acquiring == nil {
			delete(m.entries, k)
		}
	}
	m.mu.Unlock()
}
