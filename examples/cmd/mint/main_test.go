package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tollgate-go/tollgate/examples/internal/app"
)

func TestMintedTokenVerifies(t *testing.T) {
	const secret = "mint-test-secret-0123456789"
	var out, errs bytes.Buffer
	env := map[string]string{"TOLLGATE_JWT_SECRET": secret}
	if err := run([]string{"-tenant", "t42", "-tier", "pro"}, func(k string) string { return env[k] }, &out, &errs); err != nil {
		t.Fatalf("run: %v (%s)", err, errs.String())
	}
	v, err := app.NewVerifier([]byte(secret), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Verify(strings.TrimSpace(out.String()))
	if err != nil || got.ID != "t42" || got.Tier != "pro" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
	if _, err := v.Verify(strings.TrimSpace(out.String()) + "x"); err == nil {
		t.Fatal("a tampered token verified")
	}
}

func TestMintDefaultsToTheDevelopmentSecret(t *testing.T) {
	var out, errs bytes.Buffer
	if err := run([]string{"-tenant", "t1"}, func(string) string { return "" }, &out, &errs); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errs.String(), "development secret") {
		t.Errorf("no warning on stderr: %q", errs.String())
	}
	v, _ := app.NewVerifier([]byte(app.DevSecret), nil)
	if got, err := v.Verify(strings.TrimSpace(out.String())); err != nil || got.Tier != "free" {
		t.Fatalf("Verify = %+v, %v", got, err)
	}
}

func TestMintRejectsBadInput(t *testing.T) {
	for _, args := range [][]string{{}, {"-tenant", ""}, {"-tenant", "t", "-ttl", "-1s"}, {"-tenant", "t", "extra"}, {"-bogus"}} {
		var out, errs bytes.Buffer
		if err := run(args, func(string) string { return "" }, &out, &errs); err == nil {
			t.Errorf("%q: no error", args)
		}
		if out.Len() != 0 {
			t.Errorf("%q: printed a token", args)
		}
	}
}
