module github.com/tollgate-go/tollgate/connectlimit

go 1.26.0

require (
	connectrpc.com/connect v1.21.1
	github.com/tollgate-go/tollgate/conformance v0.3.0
	github.com/tollgate-go/tollgate/core v0.3.0
	google.golang.org/genproto/googleapis/rpc v0.0.0-20261110000943-09e21b237f2c
	google.golang.org/protobuf v1.36.12
)
