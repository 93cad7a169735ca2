module github.com/tollgate-go/tollgate/ginlimit

go 1.26.0
