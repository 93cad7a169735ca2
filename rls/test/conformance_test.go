package test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/tollgate-go/tollgate/conformance"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/rls"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// gatewayTarget runs the conformance suite against the RLS as Envoy uses
// it. The instance plays the gateway: its JWT filter verifies the suite's
// credential (conformance.Authenticate) and answers 401 without one, its
// route table gives each endpoint's rate_limits (class entry and
// hits_addend; exempt routes have none), and it calls ShouldRateLimit over
// TCP with failure_mode_deny: true and status_on_error 503. The answer is
// mapped as Envoy maps it: OK proceeds (200), OVER_LIMIT is 429, an error
// status is 503; response_headers_to_add become the response's headers.
type gatewayTarget struct{}

func (gatewayTarget) Protocol() conformance.Protocol { return conformance.ProtocolGRPC }

func (gatewayTarget) NewInstance(t testing.TB, s conformance.Setup) (conformance.Instance, error) {
	if s.CostReports {
		// Envoy asks before the request and, with apply_on_stream_done,
		// charges again at its end: a second check, never a settle (no
		// refund, no debt; docs/envoy.md, "Charging at stream end")
		return nil, conformance.ErrNoCostReports
	}
	c := serve(t, s.Limiter,
		rls.WithHeaderStyle(s.HeaderStyle),
		rls.WithTrustedTier(true), // the gateway's tier entry is the verified token's
		rls.WithErrorHandler(func(_ context.Context, err error) { s.OnError(err) }),
	)
	routes := s.Routes
	if s.CatchAll {
		// the gateway's catch-all route (prefix "/", after the others),
		// whose rate_limits name the default class
		routes = maps.Clone(routes)
		routes[conformance.EndpointUnrouted] = gate.Route{Class: "default", Cost: 1}
	}
	return &gateway{client: c, routes: routes, anonymous: s.Anonymous}, nil
}

type gateway struct {
	client    rlsv3.RateLimitServiceClient
	routes    map[string]gate.Route
	anonymous bool
	calls     atomic.Int64
}

func (g *gateway) HandlerCalls() int { return int(g.calls.Load()) }

func (g *gateway) Do(r conformance.Request) (conformance.Response, error) {
	route, ok := g.routes[r.Endpoint]
	if !ok {
		return conformance.Response{}, errors.New("gateway target: unknown endpoint " + r.Endpoint)
	}
	if route.Exempt { // no rate_limits on this route
		g.calls.Add(1)
		return conformance.Response{Status: 200, Header: http.Header{}}, nil
	}
	tenant, ok := conformance.Authenticate(r.Authorization())
	if !ok {
		if !g.anonymous {
			return conformance.Response{Status: 401, Header: http.Header{}}, nil
		}
		// remote_address as the tenant of anonymous callers
		tenant = quota.Tenant{ID: "anonymous:" + r.IP(), Tier: "anonymous"}
	}
	entries := []*ratelimitv3.RateLimitDescriptor_Entry{{Key: rls.KeyTenant, Value: tenant.ID}}
	if tenant.Tier != "" {
		entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: rls.KeyTier, Value: tenant.Tier})
	}
	entries = append(entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: rls.KeyClass, Value: route.Class})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := g.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{
		Domain:      "edge",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: entries}},
		HitsAddend:  uint32(route.Cost),
	})
	if err != nil {
		if status.Code(err) == codes.Unavailable {
			return conformance.Response{Status: 503, Header: http.Header{}}, nil
		}
		return conformance.Response{}, err
	}
	out := conformance.Response{Header: http.Header{}, Body: res.GetRawBody()}
	for _, h := range res.GetResponseHeadersToAdd() {
		out.Header.Add(h.GetKey(), h.GetValue())
	}
	switch res.GetOverallCode() {
	case rlsv3.RateLimitResponse_OK:
		g.calls.Add(1)
		out.Status = 200
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		out.Status = 429
	default:
		return out, errors.New("gateway target: overall code " + res.GetOverallCode().String())
	}
	return out, nil
}

func TestConformance(t *testing.T) {
	conformance.Run(t, gatewayTarget{})
}
