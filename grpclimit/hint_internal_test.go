package grpclimit

import (
	"errors"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/retry"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func TestHint(t *testing.T) {
	withDetails := func(code codes.Code, ds ...*errdetails.ErrorInfo) error {
		st := status.New(code, "x")
		for _, d := range ds {
			st, _ = st.WithDetails(d)
		}
		return st.Err()
	}
	retryIn := func(d time.Duration) error {
		st, _ := status.New(codes.ResourceExhausted, "x").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
		return st.Err()
	}
	never := &errdetails.ErrorInfo{Reason: "RATE_LIMIT_EXCEEDED", Metadata: map[string]string{"reason": "cost_exceeds_capacity"}}
	pb := func(v ...string) metadata.MD { return metadata.MD{"grpc-retry-pushback-ms": v} }
	cases := []struct {
		name      string
		err       error
		trailer   metadata.MD
		want      retry.Hint
		throttled bool
	}{
		{"pushback", status.Error(codes.ResourceExhausted, "x"), pb("250"), retry.Hint{After: 250 * time.Millisecond}, true},
		{"pushback -1", status.Error(codes.ResourceExhausted, "x"), pb("-1"), retry.Hint{Never: true}, true},
		{"malformed pushback", status.Error(codes.ResourceExhausted, "x"), pb("soon"), retry.Hint{Never: true}, true},
		{"repeated pushback", status.Error(codes.ResourceExhausted, "x"), pb("1", "2"), retry.Hint{Never: true}, true},
		{"RetryInfo, exact", retryIn(1234567 * time.Microsecond), nil, retry.Hint{After: 1234567 * time.Microsecond}, true},
		{"RetryInfo longer than pushback", retryIn(time.Second), pb("10"), retry.Hint{After: time.Second}, true},
		{"cost exceeds capacity", withDetails(codes.ResourceExhausted, never), nil, retry.Hint{Never: true}, true},
		{"Unavailable with pushback", status.Error(codes.Unavailable, "x"), pb("5"), retry.Hint{After: 5 * time.Millisecond}, true},
		{"no hint", status.Error(codes.ResourceExhausted, "message too large"), nil, retry.Hint{}, false},
		{"other code", status.Error(codes.Internal, "x"), pb("5"), retry.Hint{}, false},
		{"not a status", errors.New("boom"), pb("5"), retry.Hint{}, false},
		{"huge pushback", status.Error(codes.ResourceExhausted, "x"), pb("99999999999999"), retry.Hint{After: 365 * 24 * time.Hour}, true},
	}
	for _, c := range cases {
		h, ok := hint(c.err, c.trailer)
		if h != c.want || ok != c.throttled {
			t.Errorf("%s: hint = %+v, %v; want %+v, %v", c.name, h, ok, c.want, c.throttled)
		}
	}
}
