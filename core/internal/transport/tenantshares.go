package transport

import (
	"hash/maphash"
	"sync/atomic"
)

// tenantShares counts, per tenant, the checks holding a bounded resource
// (the batcher's queue, the wait for a connection), so that one tenant holds
// at most max of them. The count is exact and lock-free: two arrays of
// counters indexed by two hashes of the tenant, a tenant's count being the
// smaller of its two counters (a count-min sketch: it never undercounts).
// A tenant is refused only when both its counters are at the bound, which
// another tenant's flood causes only if it collides with that tenant in
// both arrays (probability about (heavy tenants / shareSlots)^2).
//
// The check needs no lock, so a flood of refused checks does not queue on
// the batcher's mutex ahead of the batches that serve everyone.
type tenantShares struct {
	max    int32
	seed   [2]maphash.Seed
	counts [2][shareSlots]atomic.Int32
}

const shareSlots = 4096

func newTenantShares(max int) *tenantShares {
	return &tenantShares{max: int32(max), seed: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
}

// slots returns tenant's counter indexes.
func (s *tenantShares) slots(tenant string) (a, b uint64) {
	return maphash.String(s.seed[0], tenant) % shareSlots, maphash.String(s.seed[1], tenant) % shareSlots
}

// take counts one more check of tenant, or reports false, counting nothing,
// when the tenant holds its whole share.
func (s *tenantShares) take(tenant string) bool {
	a, b := s.slots(tenant)
	ca, cb := &s.counts[0][a], &s.counts[1][b]
	if ca.Load() >= s.max && cb.Load() >= s.max {
		return false
	}
	ca.Add(1)
	cb.Add(1)
	return true
}

// leave counts one check of tenant out.
func (s *tenantShares) leave(tenant string) {
	a, b := s.slots(tenant)
	s.counts[0][a].Add(-1)
	s.counts[1][b].Add(-1)
}
