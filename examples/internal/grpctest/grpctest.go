// Package grpctest holds what the gRPC example's tests share (the
// in-process test of examples/grpc and the end-to-end test of its binary):
// the Authorization metadata of a call, the ExportReport stream read to its
// end, and the RetryInfo of a denial.
package grpctest

import (
	"context"
	"errors"
	"io"

	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// WithAuth puts an Authorization value in the outgoing metadata (none when
// empty).
func WithAuth(ctx context.Context, authorization string) context.Context {
	if authorization == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
}

// Export opens an ExportReport stream of two chunks and reads it to the
// end: the chunks received, the header and trailer metadata, and the error
// the stream ended with (nil at io.EOF).
func Export(ctx context.Context, c demopb.DemoClient) (chunks int, header, trailer metadata.MD, err error) {
	s, err := c.ExportReport(ctx, &demopb.ExportReportRequest{Chunks: 2})
	if err != nil {
		return 0, nil, nil, err
	}
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			header, _ = s.Header()
			return chunks, header, s.Trailer(), nil
		}
		if err != nil {
			header, _ = s.Header()
			return chunks, header, s.Trailer(), err
		}
		chunks++
	}
}

// RetryInfo returns the RetryInfo detail of st (the last one), nil when it
// has none.
func RetryInfo(st *status.Status) *errdetails.RetryInfo {
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	return retry
}
