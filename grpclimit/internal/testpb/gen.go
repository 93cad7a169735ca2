// Package testpb is the generated code of test.proto, the small service
// grpclimit's tests run against. The generated files are committed, so
// building and testing need no protoc.
//
// To regenerate after editing test.proto (protoc 3.21+, e.g. Debian's
// protobuf-compiler package; the plugins from the module proxy):
//
//	GOBIN=/tmp/pbbin go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	GOBIN=/tmp/pbbin go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//	PATH=/tmp/pbbin:$PATH go generate ./internal/testpb
package testpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative test.proto
