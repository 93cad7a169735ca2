package connectlimit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/conformance"
)

func TestMain(m *testing.M) { conformance.Main(m) }
