package connectlimit_test

import (
	"testing"

	"github.com/tollgate-go/tollgate/conformance/redistest"
)

func TestMain(m *testing.M) { redistest.MainWithCluster(m) }
