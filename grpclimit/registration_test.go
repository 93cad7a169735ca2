package grpclimit_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit"
)

// A nil gate fails where the limiter is registered, as http.Handle(pattern,
// nil) does, instead of answering every request 500.
func TestUnaryServerInterceptorPanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: grpclimit.UnaryServerInterceptor: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	grpclimit.UnaryServerInterceptor(nil)
	t.Errorf("grpclimit.UnaryServerInterceptor(nil) returned: a nil gate must fail where it is registered")
}

func TestStreamServerInterceptorPanicsOnNilGate(t *testing.T) {
	defer func() {
		if r := recover(); fmt.Sprint(r) != "tollgate: grpclimit.StreamServerInterceptor: nil gate" {
			t.Errorf("recovered %v, want the nil gate panic", r)
		}
	}()
	grpclimit.StreamServerInterceptor(nil)
	t.Errorf("grpclimit.StreamServerInterceptor(nil) returned: a nil gate must fail where it is registered")
}

// An option given a value it cannot use panics where the interceptor is
// registered, naming the constructor and the option; a nil option is
// skipped.
func TestServerInterceptorPanicsOnBadOption(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	res, err := quota.NewResolver(quota.Tiers{Default: "free", Tiers: map[string]quota.Tier{"free": {Classes: map[string]quota.Quota{"default": quota.PerSecond(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	lim, err := core.New(client, res)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.New(lim)
	if err != nil {
		t.Fatal(err)
	}
	for option, o := range map[string]grpclimit.Option{
		"grpclimit.WithFilter":       grpclimit.WithFilter(nil),
		"grpclimit.WithDeniedCode":   grpclimit.WithDeniedCode(codes.Internal),
		"grpclimit.WithDomain":       grpclimit.WithDomain(""),
		"grpclimit.WithMessageCost":  grpclimit.WithMessageCost("default", 0),
		"grpclimit.WithErrorHandler": grpclimit.WithErrorHandler(nil),
	} {
		for fn, register := range map[string]func(){
			"UnaryServerInterceptor":  func() { grpclimit.UnaryServerInterceptor(g, nil, o) },
			"StreamServerInterceptor": func() { grpclimit.StreamServerInterceptor(g, o, nil) },
		} {
			func() {
				defer func() {
					if r := fmt.Sprint(recover()); !strings.HasPrefix(r, "tollgate: grpclimit."+fn+": ") || !strings.Contains(r, option+": ") {
						t.Errorf("%s with %s: recovered %q, want a panic naming both", fn, option, r)
					}
				}()
				register()
			}()
		}
	}
	grpclimit.UnaryServerInterceptor(g, nil, grpclimit.WithDeniedCode(codes.Unavailable), grpclimit.WithMessageCost("default", 1))
}
