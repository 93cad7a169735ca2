package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// A request carrying its buckets (Request.Resolved, as a gateway resolving
// from the snapshot of its rules it holds) is decided on them, in Redis,
// without asking the resolver for those classes; a class whose entry is
// nil is still the resolver's. A Resolved list that does not match the
// classes is an invalid request, and an invalid quota in it is a
// configuration mistake (not admitted), as from a resolver.
func TestResolvedBucketsAreTheCallersNotTheResolvers(t *testing.T) {
	var asked atomic.Int64
	var askedFor atomic.Value
	res := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
		asked.Add(1)
		askedFor.Store(class)
		if class != "tier" {
			return nil, core.ErrResolve
		}
		return []quota.Bucket{{Name: "tier", Quota: quota.PerMinute(100)}}, nil
	})
	l := newLimiter(t, redistest.Client(t), res)
	ctx := context.Background()
	acme := quota.Tenant{ID: "acme"}
	gw := []quota.Bucket{{Name: "gw", Quota: quota.Quota{Capacity: 2, RefillPerSecond: 0.001}}}

	for i, want := range []bool{true, true, false} {
		d, err := l.Check(ctx, core.Request{Tenant: acme, Class: "gw", Cost: 1, Resolved: [][]quota.Bucket{gw}})
		if err != nil || d.Allowed != want || len(d.Buckets) != 1 || d.Buckets[0].Name != "gw" || d.Buckets[0].Quota != gw[0].Quota {
			t.Fatalf("check %d on the caller's bucket: %+v %v, want allowed %v on %v", i+1, d, err, want, gw[0].Quota)
		}
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("the resolver was asked %d times for a class the request resolved", n)
	}

	// mixed: Class resolved by the caller, Also's class by the resolver
	d, err := l.Check(ctx, core.Request{Tenant: quota.Tenant{ID: "other"}, Class: "gw", Also: []string{"tier"}, Cost: 1,
		Resolved: [][]quota.Bucket{gw, nil}})
	if err != nil || !d.Allowed || len(d.Buckets) != 2 {
		t.Fatalf("mixed request: %+v %v", d, err)
	}
	if n, c := asked.Load(), askedFor.Load(); n != 1 || c != "tier" {
		t.Fatalf("the resolver was asked %d times (last for %v), want once, for tier", n, c)
	}

	// a list per class, no more, no less
	d, err = l.Check(ctx, core.Request{Tenant: acme, Class: "gw", Also: []string{"tier"}, Cost: 1, Resolved: [][]quota.Bucket{gw}})
	if !errors.Is(err, core.ErrInvalidRequest) || d.Reason != core.ReasonInvalid || d.Allowed {
		t.Fatalf("Resolved shorter than the classes: %+v %v, want ErrInvalidRequest", d, err)
	}
	// an invalid quota is not admitted, as a resolver's
	bad := [][]quota.Bucket{{{Name: "gw", Quota: quota.Quota{Capacity: 0, RefillPerSecond: 1}}}}
	d, err = l.Check(ctx, core.Request{Tenant: acme, Class: "gw", Cost: 1, Resolved: bad})
	if !errors.Is(err, quota.ErrInvalid) || d.Reason != core.ReasonUnresolved || d.Allowed {
		t.Fatalf("invalid resolved quota: %+v %v, want quota.ErrInvalid, not admitted", d, err)
	}
	// an empty list is no buckets: a configuration mistake too
	d, err = l.Check(ctx, core.Request{Tenant: acme, Class: "gw", Cost: 1, Resolved: [][]quota.Bucket{{}}})
	if !errors.Is(err, core.ErrResolve) || d.Allowed {
		t.Fatalf("empty resolved list: %+v %v, want ErrResolve, not admitted", d, err)
	}
}
