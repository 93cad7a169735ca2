package grpclimit_test

import (
	"context"
	"testing"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/gate"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/grpclimit"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// benchStream is the smallest grpc.ServerStream, so the stream benchmark
// measures the interceptor rather than a transport.
type benchStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s benchStream) Context() context.Context     { return s.ctx }
func (s benchStream) SetHeader(metadata.MD) error  { return nil }
func (s benchStream) SendHeader(metadata.MD) error { return nil }
func (s benchStream) SetTrailer(metadata.MD)       {}

// BenchmarkOverhead measures the interceptors against the core call they
// wrap, on the same real Redis: the difference between "core" and
// "unary"/"stream" is the adapter's own cost (mapping, metadata). Compare
// with benchstat.
func BenchmarkOverhead(b *testing.B) {
	res, err := quota.NewResolver(quota.Tiers{Default: "bench", Tiers: map[string]quota.Tier{
		"bench": {Classes: map[string]quota.Quota{"default": {Capacity: 1 << 40, RefillPerSecond: 1e9}}},
	}})
	if err != nil {
		b.Fatal(err)
	}
	lim, err := core.New(redistest.Client(b), res, core.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	g, err := gate.New(lim)
	if err != nil {
		b.Fatal(err)
	}
	ctx := gate.ContextWithTenant(context.Background(), quota.Tenant{ID: "bench"})
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &benchAddr{}})
	ctx = grpc.NewContextWithServerTransportStream(ctx, benchTransportStream{})
	b.Run("core", func(b *testing.B) {
		for b.Loop() {
			if v := g.Decide(ctx, gate.Endpoint{Pattern: mProfile}); !v.Proceed {
				b.Fatal(v.Err)
			}
		}
	})
	b.Run("unary", func(b *testing.B) {
		u := grpclimit.UnaryServerInterceptor(g)
		info := &grpc.UnaryServerInfo{FullMethod: mProfile}
		h := func(context.Context, any) (any, error) { return nil, nil }
		for b.Loop() {
			if _, err := u(ctx, nil, info, h); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		s := grpclimit.StreamServerInterceptor(g)
		info := &grpc.StreamServerInfo{FullMethod: mExport, IsServerStream: true}
		ss := benchStream{ctx: ctx}
		h := func(any, grpc.ServerStream) error { return nil }
		for b.Loop() {
			if err := s(nil, ss, info, h); err != nil {
				b.Fatal(err)
			}
		}
	})
}

type benchAddr struct{}

func (benchAddr) Network() string { return "tcp" }
func (benchAddr) String() string  { return "198.51.100.1:40000" }

// benchTransportStream lets grpc.SetHeader work outside a real server.
type benchTransportStream struct{}

func (benchTransportStream) Method() string               { return mProfile }
func (benchTransportStream) SetHeader(metadata.MD) error  { return nil }
func (benchTransportStream) SendHeader(metadata.MD) error { return nil }
func (benchTransportStream) SetTrailer(metadata.MD) error { return nil }
