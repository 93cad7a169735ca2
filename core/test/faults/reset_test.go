package faults_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestClusterResetFromCLI: the operator's tool, run as a real binary
// against a local 3-master Cluster, resets a tenant whose slot lives on
// some master: every bucket of the tenant is deleted, none of another's,
// and the count it reports is the number of keys deleted.
func TestClusterResetFromCLI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tollgate")
	build := exec.Command("go", "build", "-o", bin, "github.com/tollgate-go/tollgate/cmd/tollgate")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the tollgate CLI: %v\n%s", err, out)
	}
	cluster := redistest.NewCluster(t, 3, 0)
	cc := cluster.Client(t)
	prefix := redistest.Prefix(t)
	classes := quota.ResolverFunc(func(_ context.Context, _ quota.Tenant, class string) ([]quota.Bucket, error) {
		return []quota.Bucket{{Name: class, Quota: slowQuota}}, nil
	})
	lim, err := core.New(cc, classes, core.WithPrefix(prefix), core.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lim.Close() })
	ctx := context.Background()
	// tenants on different masters: whichever node the URL names, the
	// reset must reach the tenant's
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	for _, tn := range tenants {
		for _, class := range []string{"default", "export", "upload"} {
			if _, err := lim.Allow(ctx, quota.Tenant{ID: tn}, class, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	addrs := cluster.Addrs()
	url := "redis+cluster://" + addrs[0]
	start := time.Now()
	for _, tn := range tenants[:3] {
		cmd := exec.Command(bin, "bucket", "reset", "--json", "--yes", "--redis-url", url, "--prefix", prefix, tn)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("tollgate bucket reset %s: %v\n%s%s", tn, err, stdout.String(), stderr.String())
		}
		var out struct {
			Deleted int64 `json:"deleted"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || out.Deleted != 3 {
			t.Fatalf("reset %s reported %q (%v), want 3 keys deleted", tn, stdout.String(), err)
		}
	}
	took := time.Since(start)
	for i, tn := range tenants {
		for _, class := range []string{"default", "export", "upload"} {
			k, _ := lim.Keys().Bucket(tn, class)
			n, err := cc.Exists(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := int64(0); i == 3 {
				want = 1
				if n != want {
					t.Errorf("%s was deleted by another tenant's reset", k)
				}
			} else if n != want {
				t.Errorf("%s survived its tenant's reset", k)
			}
		}
	}
	// a plain redis:// URL reaches one node: the tool must not claim a
	// Cluster reset it cannot do (it either deletes or fails, never "0"
	// while keys remain)
	k, _ := lim.Keys().Bucket("umbrella", "default")
	owner, err := cc.MasterForKey(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a == owner.Options().Addr {
			continue
		}
		cmd := exec.Command(bin, "bucket", "reset", "--yes", "--redis-url", "redis://"+a, "--prefix", prefix, "umbrella", "default")
		out, _ := cmd.CombinedOutput()
		if n, _ := cc.Exists(ctx, k).Result(); n == 1 && strings.Contains(string(out), "1 key(s) deleted") {
			t.Fatalf("reset through a non-owner node claimed a deletion that did not happen: %s", out)
		}
		break
	}
	t.Logf("3 resets from the CLI in %v", took)
	record(row{"Cluster reset from the CLI (redis+cluster:// URL, 3 masters)", core.FailClosed,
		"deletes every bucket of the tenant on its slot's master, none of another tenant's; reports the count", took / 3})
}
