module github.com/tollgate-go/tollgate/grpclimit

go 1.26.0
