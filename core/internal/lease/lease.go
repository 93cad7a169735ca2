// Package lease holds this replica's token leases: per bucket set (tenant
// and class), tokens taken from the store as one charge of the lease's
// size, spent locally until they run out or the lease expires.
//
// The map is bounded. At the bound it drops leases that have expired
// (their unspent tokens are lost by design then); it never drops a live
// lease, whose unspent tokens its tenant has paid for. When every entry is
// live, a check that finds no lease of its own is a plain check: it takes
// no lease until one expires.
package lease

import (
	"strings"
	"sync"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
)

// Class is one class's lease setting.
type Class struct {
	Size int64
	TTL  time.Duration
}

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
// when no check is taking a lease for keys, it marks the caller as the one
// who does (acquire true: the caller must call Release with the returned
// lease); when another check is taking one, it returns that acquisition to
// wait on. With neither (acquire false, or a full map of live leases) the
// caller makes a plain check.
func (m *Map) Spend(keys []string, quotaOf func(i int) quota.Quota, cost int64, now time.Time, acquire bool) (tokens []float64, ok bool, wait *Acquisition, acquiring *Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.entries[keys[0]]
	if e != nil && !e.matches(keys, quotaOf) {
		// another bucket set or a changed quota: the lease proves nothing
		if e.acquiring != nil {
			return nil, false, e.acquiring, nil
		}
		delete(m.entries, keys[0])
		e = nil
	}
	if e != nil && e.base != nil && e.tokens >= cost && now.Before(e.expires) {
		e.tokens -= cost
		tokens = make([]float64, len(e.base))
		for i, b := range e.base {
			tokens[i] = b + float64(e.tokens)
		}
		return tokens, true, nil, nil
	}
	if e != nil && e.acquiring != nil {
		return nil, false, e.acquiring, nil
	}
	if !acquire {
		return nil, false, nil, nil
	}
	if e == nil {
		if len(m.entries) >= m.max && !m.sweep(now) {
			return nil, false, nil, nil // every lease is live: none is burned
		}
		e = &Lease{keys: keys}
		m.entries[keys[0]] = e
	}
	e.acquiring = &Acquisition{done: make(chan struct{})}
	return nil, false, nil, e
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
// after it charged the lease, of buckets of quotas), the lease holds
// unspent tokens until expires, if it is still the map's; with none (nil)
// it is dropped.
func (m *Map) Release(e *Lease, quotas []quota.Quota, base []float64, unspent int64, expires time.Time, failure error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if a := e.acquiring; a != nil {
		a.err = failure
		close(a.done)
		e.acquiring = nil
	}
	current := m.entries[e.keys[0]] == e
	if base == nil {
		if current {
			delete(m.entries, e.keys[0])
		}
		return
	}
	if current {
		e.quotas, e.base, e.tokens, e.expires = quotas, base, unspent, expires
		if expires.Before(m.noneBefore) {
			m.noneBefore = expires
		}
	}
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
