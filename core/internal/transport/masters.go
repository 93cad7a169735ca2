package transport

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// masters keeps one T per Cluster master (by address), for what must not
// be shared across masters: a batcher's pipelines in flight and queue, a
// Direct's connection slots. A command line's master is the one holding
// its first key (a check's keys share its tenant's slot). Without a
// Cluster, or when the master is not known (no slot map yet), the one T.
type masters[T any] struct {
	cluster *redis.ClusterClient // nil: one T
	one     *T
	mk      func(node *redis.Client) *T // a new master's T
	byAddr  sync.Map                    // master address -> *T
	mu      sync.Mutex                  // a T is added under it
	n       int                         // under mu
	closed  bool                        // under mu: no T is added any more
}

// maxMasters bounds the Ts kept for Cluster masters (addresses change
// with failovers): past it, new masters share the one.
const maxMasters = 1024

func newMasters[T any](client redis.UniversalClient, one *T, mk func(*redis.Client) *T) *masters[T] {
	m := &masters[T]{one: one, mk: mk}
	m.cluster, _ = client.(*redis.ClusterClient)
	return m
}

// of returns the T of the master that holds the keys of args (a whole
// command line, see Script.Args).
func (m *masters[T]) of(ctx context.Context, args []any) *T {
	if m.cluster == nil {
		return m.one
	}
	if n, _ := args[2].(int); n == 0 {
		return m.one
	}
	key, ok := args[3].(string)
	if !ok {
		return m.one
	}
	// the slot map is cached (the breaker looks the same master up for
	// the check); a lookup that must load it is bounded by the client's
	// own timeouts
	node, err := m.cluster.MasterForKey(ctx, key)
	if err != nil {
		return m.one
	}
	addr := node.Options().Addr
	if t, ok := m.byAddr.Load(addr); ok {
		return t.(*T)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.byAddr.Load(addr); ok {
		return t.(*T)
	}
	if m.closed || m.n >= maxMasters {
		return m.one
	}
	t := m.mk(node)
	m.byAddr.Store(addr, t)
	m.n++
	return t
}

// close stops adding Ts and calls f on each one there is.
func (m *masters[T]) close(f func(*T)) {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
	f(m.one)
	m.byAddr.Range(func(_, t any) bool {
		f(t.(*T))
		return true
	})
}
