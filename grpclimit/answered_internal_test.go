package grpclimit

import (
	"testing"

	"google.golang.org/grpc/metadata"
)

// A header frame with only the transport's fields (what a server on
// net/http sends before an error it cannot make Trailers-Only) is no
// answer; one with any metadata of the call's is.
func TestAnswered(t *testing.T) {
	for _, c := range []struct {
		md   metadata.MD
		want bool
	}{
		{nil, false},
		{metadata.MD{}, false},
		{metadata.Pairs("content-type", "application/grpc", "date", "Sat, 05 Dec 2026 03:54:32 GMT", "grpc-accept-encoding", "gzip", "grpc-encoding", "identity"), false},
		{metadata.Pairs("content-type", "application/grpc", "ratelimit", `"default";r=0;t=1`), true},
		{metadata.Pairs("x-request-id", "1"), true},
	} {
		if got := answered(c.md); got != c.want {
			t.Errorf("answered(%v) = %v, want %v", c.md, got, c.want)
		}
	}
}
