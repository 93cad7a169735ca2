// Package demopb is the generated code of demo.proto, the example gRPC
// service tollgate.demo.v1.Demo. The generated files are committed, so
// building and running the example needs no protoc.
//
// To regenerate after editing demo.proto (protoc 3.21+, e.g. Debian's
// protobuf-compiler package; the plugins from the module proxy), from the
// examples module:
//
//	GOBIN=/tmp/pbbin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	GOBIN=/tmp/pbbin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	PATH=/tmp/pbbin:$PATH go generate ./internal/demopb
package demopb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative demo.proto
