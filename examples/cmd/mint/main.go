// Command mint prints a bearer token the example services accept: HS256,
// signed with TOLLGATE_JWT_SECRET (or the examples' development secret when
// it is unset), with the claims tenant and tier and an expiry.
//
//	cd examples && go run ./cmd/mint -tenant t42 -tier free
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/app"
)

func main() {
	if err := run(os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mint:", err)
		os.Exit(2)
	}
}

func run(args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("mint", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "tenant ID (required)")
	tier := fs.String("tier", "free", "tier: free or pro with the built-in tiers")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *tenant == "" {
		return fmt.Errorf("-tenant is required")
	}
	secret := getenv("TOLLGATE_JWT_SECRET")
	if secret == "" {
		secret = app.DevSecret
		fmt.Fprintln(stderr, "mint: TOLLGATE_JWT_SECRET is not set: signing with the examples' development secret")
	}
	tok, err := app.Mint([]byte(secret), *tenant, *tier, *ttl)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(stdout, tok)
	return err
}
