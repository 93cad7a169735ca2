package core

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate-go/tollgate/core/internal/stack"
	"github.com/tollgate-go/tollgate/core/quota"
)

// TestNoLayerHoldsTheLimiter: each layer of the check path holds its own
// state, the values it needs and its next layer, never the whole Limiter.
// It walks every struct the stack reaches from its top (every layer on:
// leases, the deny cache, the local fallback), by value, through pointers
// and interfaces into this module's types, and fails on a field of type
// *Limiter, or a func that is a method of one (a hook bound to the
// limiter).
func TestNoLayerHoldsTheLimiter(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never called
	defer c.Close()
	r := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) { return nil, nil })
	l, err := New(c, r, WithDenyCache(true), WithLocalFallback(0.5), WithLeases("default", 10, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	w := walker{limiter: reflect.TypeFor[*Limiter](), seen: map[uintptr]bool{}}
	w.value(reflect.ValueOf(&l.path.top).Elem(), "top")
	for _, at := range w.found {
		t.Errorf("%s: a layer holds the limiter; give it the values it needs", at)
	}
	// the walk can fail: it sees the limiter where it is
	w = walker{limiter: reflect.TypeFor[*Limiter](), seen: map[uintptr]bool{}}
	w.value(reflect.ValueOf(&struct {
		l   *Limiter
		log func(string, Request, error, ...any)
	}{l, l.logDegraded}).Elem(), "probe")
	if len(w.found) != 2 {
		t.Fatalf("the walk found %v in a struct holding the limiter and one of its methods: it is blind", w.found)
	}
	if n := layers(reflect.ValueOf(l.path.top)); n != 5 {
		t.Fatalf("the stack has %d layers, want every one of the 5 on", n)
	}
}

type walker struct {
	limiter reflect.Type
	seen    map[uintptr]bool
	found   []string
}

const module = "github.com/tollgate-go/tollgate/core"

// value visits v, reached by path.
func (w *walker) value(v reflect.Value, path string) {
	if v.Type() == w.limiter {
		w.found = append(w.found, path)
		return
	}
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			w.value(v.Elem(), path)
		}
	case reflect.Pointer:
		if v.IsNil() || !strings.HasPrefix(v.Type().Elem().PkgPath(), module) || w.seen[v.Pointer()] {
			return
		}
		w.seen[v.Pointer()] = true
		w.value(v.Elem(), path)
	case reflect.Struct:
		for i := range v.NumField() {
			w.value(v.Field(i), path+"."+v.Type().Field(i).Name)
		}
	case reflect.Func:
		if !v.IsNil() {
			if name := runtime.FuncForPC(v.Pointer()).Name(); strings.Contains(name, "(*Limiter)") {
				w.found = append(w.found, path+" = "+name)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			w.value(v.Index(i), path+"[]")
		}
	}
}

// layers counts the layers of the stack from v down, each found as the
// one field of its layer's of type Layer.
func layers(v reflect.Value) int {
	n := 0
	for v.IsValid() {
		if v.Kind() == reflect.Interface {
			if v.IsNil() {
				break
			}
			v = v.Elem()
		}
		if _, ok := v.Type().MethodByName("Decide"); !ok || v.Kind() != reflect.Pointer {
			break
		}
		n++
		s, next := v.Elem(), reflect.Value{}
		for i := range s.NumField() {
			if f := s.Field(i); f.Kind() == reflect.Interface && f.Type().Name() == "Layer" {
				next = f
			}
		}
		v = next
	}
	return n
}

// A result is stated as the Decision of its binding bucket, its states
// the decision's own (not copied); an answer without buckets states its
// reason and cost, admitted only when failed open.
func TestAnswer(t *testing.T) {
	l := &Limiter{}
	q := quota.Quota{Capacity: 10, RefillPerSecond: 4}
	r := stack.Result{Verdict: stack.OverLimit, Binding: 1, Retry: time.Second, Cost: 3, Buckets: []stack.Bucket{
		{Name: "a", Quota: q, Tokens: 5}, {Name: "b", Quota: q, Tokens: 1.5, Stamp: time.UnixMicro(7)},
	}}
	req := Request{Class: "default", Also: []string{"x"}, AlsoCosts: []int64{5}}
	d := l.answer(&req, &stack.Call{Costs: []int64{3, 5}}, r)
	if d.Allowed || d.Reason != ReasonOverLimit || d.Bucket != "b" || d.Limit != 10 || d.Remaining != 1 || d.Tokens != 1.5 ||
		d.RetryAfter != time.Second || d.ResetAfter != 2125*time.Millisecond || d.Cost != 3 || !d.mixedCosts || d.class != "default" || len(d.also) != 1 {
		t.Fatalf("denial: %+v", d)
	}
	if len(d.Buckets) != 2 || d.Buckets[1].Stamp != time.UnixMicro(7) || &d.Buckets[0].Tokens != &r.Buckets[0].Tokens {
		t.Fatalf("the decision's buckets %+v are not the result's states", d.Buckets)
	}
	for v, allowed := range map[stack.Verdict]bool{stack.FailedOpen: true, stack.FailedClosed: false, stack.Canceled: false, stack.Overloaded: false} {
		d := l.answer(&req, &stack.Call{}, stack.Result{Verdict: v, Cost: 3})
		if d.Reason != Reason(v) || d.Allowed != allowed || d.Cost != 3 || d.Buckets != nil || d.mixedCosts {
			t.Errorf("verdict %v: %+v; want reason %v, allowed %v, cost 3, no bucket", v, d, Reason(v), allowed)
		}
	}
}

// The Limiter keeps its fields grouped by owner: at most 10.
func TestLimiterFields(t *testing.T) {
	if n := reflect.TypeFor[Limiter]().NumField(); n > 10 {
		t.Errorf("Limiter has %d fields, more than 10: group what a new one holds with its owner", n)
	}
}
