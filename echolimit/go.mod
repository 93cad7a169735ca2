module github.com/tollgate-go/tollgate/echolimit

go 1.26.0
