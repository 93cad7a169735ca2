package test

import (
	"os"
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
)

func TestMain(m *testing.M) {
	if os.Getenv(quotaChildEnv) != "" {
		os.Exit(runQuotaChild()) // a quota client process (rlqschild_test.go)
	}
	conformance.Main(m)
}
