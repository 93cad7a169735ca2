package e2e_test

import (
	"context"
	"database/sql"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/examples/internal/app"
	"github.com/tollgate-go/tollgate/internal/redistest"
	"github.com/tollgate-go/tollgate/sqlquota"
	_ "modernc.org/sqlite" // database/sql driver "sqlite"
)

// newTenants is how many tenants, each on its first request, flood the
// service; newTenantWorkers send them, each its next as soon as it has the
// last answer.
const (
	newTenants       = 10_000
	newTenantWorkers = 64
)

// The Gin example as a real process with its default overrides (a SQLite
// file) and its tier file (a 100 ms check timeout, failing open), Redis
// healthy: 10,000 tenants it has never seen send their first request
// while the override database holds a lock, so that no override lookup
// answers in time. Every request is still decided by Redis on the tier's
// defaults: no decision fails open, no request passes unchecked, no store
// error is counted, and the late lookups are counted in
// tollgate.overrides.late. Once the lock is released, a tenant with an
// override gets it on a later request (the lookup filled the cache), and a
// second flood of 10,000 new tenants, the database free but as slow as a
// flood makes it, is decided by Redis too.
// Before, a first lookup that missed the check timeout was a store
// failure: every one of these requests was let through unchecked.
func TestFloodOfNewTenantsOnGin(t *testing.T) {
	t.Parallel()
	srv := redistest.NewServer(t)
	if err := srv.Favor(); err != nil {
		t.Logf("the private Redis runs at the test's priority: %v", err)
	}
	addr := freeAddr(t)
	dbPath := filepath.Join(t.TempDir(), "overrides.db")
	p := start(t, "gin", "ADDR="+addr, "REDIS_URL="+srv.URL(), "TOLLGATE_JWT_SECRET="+secret, "DATABASE_URL=sqlite://"+dbPath)
	base := "http://" + addr
	waitHealthy(t, p, base+app.PathHealth)

	// one of the new tenants has an override (the service made the table)
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := sqlquota.New(db, sqlquota.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := tenantID(t, "new")
	vip := run + "-vip"
	const vipCapacity = 7
	if _, err := store.Set(ctx, sqlquota.Override{TenantID: vip, Bucket: "default", Quota: quota.Quota{Capacity: vipCapacity, RefillPerSecond: 1}, UpdatedBy: "e2e"}); err != nil {
		t.Fatal(err)
	}
	// the database holds a lock: every override lookup waits
	lock, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			if _, err := lock.ExecContext(ctx, "ROLLBACK"); err != nil {
				t.Error(err)
			}
			_ = lock.Close()
		}
	}
	defer unlock()

	newTokens := func(prefix string) []string {
		tokens := make([]string, newTenants)
		for i := range tokens {
			id := prefix + "-" + strconv.Itoa(i)
			if i == 0 {
				id = vip
			}
			tok, err := app.Mint([]byte(secret), id, "free", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			tokens[i] = "Bearer " + tok
		}
		return tokens
	}
	tr := &http.Transport{MaxIdleConnsPerHost: newTenantWorkers, MaxConnsPerHost: newTenantWorkers}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: ioWithin}
	get := func(tally *httpTally, auth string) http.Header {
		req, _ := http.NewRequest(http.MethodGet, base+app.PathProfile, nil)
		req.Header.Set("Authorization", auth)
		resp, err := c.Do(req)
		if err != nil {
			tally.fail(err.Error())
			return nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		tally.count(resp.StatusCode, resp.Header)
		return resp.Header
	}
	// flood sends every token's request, newTenantWorkers at a time, and
	// checks what the tenants got
	flood := func(what string, tokens []string) {
		tally := &httpTally{}
		next := make(chan string)
		var wg sync.WaitGroup
		begin := time.Now()
		for range newTenantWorkers {
			wg.Go(func() {
				for auth := range next {
					get(tally, auth)
				}
			})
		}
		for _, auth := range tokens {
			next <- auth
		}
		close(next)
		wg.Wait()
		t.Logf("%d new tenants on %d connections, %s, in %v: %v", len(tokens), newTenantWorkers, what, time.Since(begin).Round(time.Millisecond), tally)
		if n := tally.unchecked.Load(); n != 0 {
			t.Errorf("%s: %d first requests passed unchecked", what, n)
		}
		if n := tally.admitted.Load(); n*10 < int64(len(tokens))*9 {
			t.Errorf("%s: %d of %d first requests admitted by the store, want at least 90%% (the rest may be shed on a loaded machine): %v", what, n, len(tokens), tally)
		}
		if n := tally.other.Load() + tally.errs.Load(); n != 0 {
			t.Errorf("%s: %d other answers or errors: %v", what, n, tally)
		}
	}
	tokens := newTokens(run)
	flood("the override database locked", tokens)
	unlock()

	// the lookups, going on once the lock is gone, fill the cache: the
	// tenant with an override gets it (its lookup is retried after a
	// failure's pause, 5 s, when it outlived the lookup timeout)
	vipTally := &httpTally{}
	deadline := time.Now().Add(30 * time.Second)
	for {
		h := get(vipTally, tokens[0])
		if h.Get("X-RateLimit-Limit") == strconv.Itoa(vipCapacity) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the override never applied once the database answered: limit %q (%v)", h.Get("X-RateLimit-Limit"), vipTally)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// and the flood again, the database answering as fast as it can
	flood("the override database free", newTokens(run + "-free")[1:]) // the first is vip's

	mc := newClient(t)
	r := mc.do(t, http.MethodGet, base+app.PathMetrics, "")
	mc.tr.CloseIdleConnections()
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %d", r.status)
	}
	late := false
	for line := range strings.Lines(r.body) {
		switch {
		case strings.HasPrefix(line, "tollgate_store_errors_total") && !zeroSample(line):
			t.Errorf("a store error was counted with Redis healthy: %s", line)
		case strings.HasPrefix(line, "tollgate_decisions_total{") && strings.Contains(line, `outcome="failed_open"`) && !zeroSample(line):
			t.Errorf("a decision failed open: %s", line)
		case strings.HasPrefix(line, "tollgate_overrides_late_total{") && !zeroSample(line):
			late = true
			t.Logf("metrics: %s", strings.TrimSpace(line))
		case strings.HasPrefix(line, "tollgate_checks_shed_total{"):
			t.Logf("metrics: %s", strings.TrimSpace(line))
		}
	}
	if !late {
		t.Error("no late override lookup counted (tollgate_overrides_late_total)")
	}
	stop(t, p)
}
