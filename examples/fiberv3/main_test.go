package main

import (
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m, apptest.FastHTTPGoroutines...) }

func TestService(t *testing.T) { apptest.Server(t, Run) }
