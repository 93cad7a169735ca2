package transport

// fairQueue holds checks waiting for something (a batch, a connection),
// one FIFO per tenant, served round robin: one check of each waiting tenant
// in turn, so a tenant with one check waiting is served next or soon after
// however many checks a flooding tenant has queued. Its user's mutex
// guards it.
type fairQueue[T any] struct {
	byTenant map[string]*tenantQueue[T]
	ring     []*tenantQueue[T] // tenants with checks waiting, in serving order
	next     int               // the ring's next tenant to serve
	n        int               // checks waiting in all
	// free holds emptied tenant queues for the next tenants to wait (at
	// most maxFreeTenantQueues): a tenant's first check waiting allocates none
	free []*tenantQueue[T]
}

const maxFreeTenantQueues = 256

type tenantQueue[T any] struct {
	tenant string
	checks []T
}

func newFairQueue[T any]() fairQueue[T] { return fairQueue[T]{byTenant: map[string]*tenantQueue[T]{}} }

func (q *fairQueue[T]) push(tenant string, c T) {
	tq := q.byTenant[tenant]
	if tq == nil {
		if n := len(q.free); n > 0 {
			tq, q.free[n-1] = q.free[n-1], nil
			q.free = q.free[:n-1]
			tq.tenant = tenant
		} else {
			tq = &tenantQueue[T]{tenant: tenant}
		}
		q.byTenant[tenant] = tq
		q.ring = append(q.ring, tq)
	}
	tq.checks = append(tq.checks, c)
	q.n++
}

// pop returns the next check in round-robin order; ok is false when none
// waits.
func (q *fairQueue[T]) pop() (c T, ok bool) {
	if q.n == 0 {
		return c, false
	}
	if q.next >= len(q.ring) {
		q.next = 0
	}
	tq := q.ring[q.next]
	c = tq.checks[0]
	var zero T
	tq.checks[0] = zero
	tq.checks = tq.checks[1:]
	q.n--
	if len(tq.checks) == 0 {
		delete(q.byTenant, tq.tenant)
		copy(q.ring[q.next:], q.ring[q.next+1:])
		q.ring[len(q.ring)-1] = nil
		q.ring = q.ring[:len(q.ring)-1]
		if len(q.free) < maxFreeTenantQueues {
			tq.tenant, tq.checks = "", tq.checks[:0]
			q.free = append(q.free, tq)
		}
	} else {
		q.next++
	}
	return c, true
}
