package conformance

import (
	"testing"
)

// Run runs every scenario against target, each as a named subtest, on a
// standalone Redis and on a Redis Cluster (see the package documentation).
func Run(t *testing.T, target Target) {
	t.Helper()
	if target == nil {
		t.Fatal("conformance: nil Target")
	}
	switch target.Protocol() {
	case ProtocolHTTP, ProtocolGRPC:
	default:
		t.Fatalf("conformance: unknown protocol %d", target.Protocol())
	}
	runScenarios(t, target)
}
