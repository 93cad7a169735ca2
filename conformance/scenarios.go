package conformance

import "testing"

func runScenarios(t *testing.T, target Target) {}
