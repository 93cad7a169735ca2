module github.com/tollgate-go/tollgate/httplimit

go 1.26.0
