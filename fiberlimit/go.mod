module github.com/tollgate-go/tollgate/fiberlimit

go 1.26.0
