package e2e_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/internal/redistest"
)

// TestReportsAfterRedisStallOnGin: the Gin example (built-in tiers: the
// free tier's reports class allows 2 in flight, check timeout 100 ms,
// fail-open) while its private Redis stalls (SIGSTOP) for 0.5 s with 6
// requests of /v1/reports in flight: they are answered by the failure
// policy, and Redis runs their checks when it resumes. The tenant's next
// request is admitted by Redis (200 with the concurrency policy in its
// RateLimit header) within 1 s after the resume. Before a check's
// unanswered slot was forgotten, the tenant was refused (429) for the
// whole lease, 10 s.
func TestReportsAfterRedisStallOnGin(t *testing.T) {
	t.Parallel()
	srv := redistest.NewServer(t)
	addr := freeAddr(t)
	p := start(t, "gin", "ADDR="+addr, "REDIS_URL="+srv.URL(), "TOLLGATE_JWT_SECRET="+secret,
		"DATABASE_URL=sqlite://"+t.TempDir()+"/overrides.db")
	base := "http://" + addr
	waitHealthy(t, p, base+app.PathHealth)
	auth := "Bearer " + token(t, tenantID(t, "stall"), "free")
	c := newClient(t)
	c.tr.MaxIdleConnsPerHost = 8
	url := base + "/v1/reports"
	byRedis := func(r response) bool {
		return r.status == http.StatusOK && strings.Contains(r.header.Get("RateLimit"), "reports/concurrency")
	}
	// the tenant's override lookup and the connections are made before
	if r := c.do(t, http.MethodGet, url, auth); !byRedis(r) {
		t.Fatalf("before the stall: %d %v", r.status, r.header)
	}

	start := time.Now()
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	var wg sync.WaitGroup
	statuses := make([]int, 6)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = c.do(t, http.MethodGet, url, auth).status // bounded by the client's timeout
		}()
	}
	time.Sleep(time.Until(start.Add(500 * time.Millisecond))) // the stall's length: the fault itself
	resumed = true
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	wg.Wait()
	t.Logf("answers to the requests in flight during the stall: %v", statuses)

	const within = time.Second
	before := map[int]int{} // the answers before the admission, by status
	for {
		r := c.do(t, http.MethodGet, url, auth)
		if byRedis(r) {
			break
		}
		before[r.status]++
		if time.Since(at) > within {
			t.Fatalf("the tenant's next request not admitted by Redis within %v after it resumed (answers before, by status: %v): last %d %s", within, before, r.status, r.body)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("admitted by Redis %v after it resumed; answers before, by status: %v", time.Since(at).Round(time.Millisecond), before)
	stop(t, p)
}
