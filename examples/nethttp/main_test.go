package main

import (
	"net/http/httptest"
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

func TestService(t *testing.T) {
	a := apptest.New(t)
	h, err := NewHandler(a)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	apptest.HTTP(t, a, srv.URL)
}
