package main

import (
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

func TestService(t *testing.T) { apptest.Handler(t, NewHandler) }
