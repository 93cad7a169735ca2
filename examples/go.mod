module github.com/tollgate-go/tollgate/examples

go 1.26.0

replace (
	github.com/tollgate-go/tollgate/conformance => ../conformance
	github.com/tollgate-go/tollgate/core => ../core
)

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tollgate-go/tollgate/core v0.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/time v0.16.0
)
