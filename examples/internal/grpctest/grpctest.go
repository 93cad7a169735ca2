// Package grpctest holds what the gRPC example's tests share (the
// in-process test of examples/grpc and the end-to-end test of its binary):
// the Authorization metadata of a call and the ExportReport stream read to
// its end.
package grpctest

import (
	"context"
	"errors"
	"io"

	"github.com/tollgate-go/tollgate/examples/internal/demopb"
	"google.golang.org/grpc/metadata"
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
