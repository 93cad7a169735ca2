package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tollgate-go/tollgate/rls/internal/rlqsclient"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A quota client process: the test binary re-executed with quotaChildEnv
// set (TestMain runs it in place of the tests). It is one Envoy: an
// rlqsclient over the servers in quotaChildEnv (comma-separated, tried in
// turn after each break), offering its demand on acme's default bucket
// for its duration, and printing its counts as a JSON line every 20 ms.
const quotaChildEnv = "TOLLGATE_TEST_RLQS_CHILD"

// quotaChildSpec is what a child is told, in its environment.
type quotaChildSpec struct {
	Addrs    []string
	Demand   float64
	Duration time.Duration
}

// quotaSnapshot is one line a child prints.
type quotaSnapshot struct {
	Stats rlqsclient.Stats
	Out   float64 // what its assignment can admit before its TTL ends
	Done  bool
}

// runQuotaChild is the child's main; it returns the exit code.
func runQuotaChild() int {
	var spec quotaChildSpec
	if err := json.Unmarshal([]byte(os.Getenv(quotaChildEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "quota child:", err)
		return 2
	}
	var conns []*grpc.ClientConn
	for _, a := range spec.Addrs {
		cc, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, "quota child:", err)
			return 2
		}
		defer cc.Close()
		conns = append(conns, cc)
	}
	c := rlqsclient.New(rlqsclient.Config{Domain: "test", ReportInterval: rlqsReport, Fallback: denyFallback, FallbackTimeout: time.Hour}, conns...)
	id := map[string]string{"tenant": "acme"}
	ctx, cancel := context.WithTimeout(context.Background(), spec.Duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go offer(ctx, c, id, spec.Demand, &wg)
	enc := json.NewEncoder(os.Stdout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		if done {
			wg.Wait()
		}
		if err := enc.Encode(quotaSnapshot{Stats: c.Stats(), Out: outstanding(c, id), Done: done}); err != nil {
			return 2
		}
	}
	c.Close()
	return 0
}

// quotaChild is a client process as its parent sees it: its last line.
type quotaChild struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	last quotaSnapshot
	at   time.Time // when last was read
	done chan struct{}
}

// snapshot is the child's last line (at most 20 ms old, and the pipe's
// delay), and when it was read.
func (q *quotaChild) snapshot() quotaSnapshot {
	s, _ := q.snapshotAt()
	return s
}

func (q *quotaChild) snapshotAt() (quotaSnapshot, time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last, q.at
}

// startQuotaChild starts a client process; the cleanup kills it if it is
// still running.
func startQuotaChild(t *testing.T, spec quotaChildSpec) *quotaChild {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	q := &quotaChild{cmd: exec.Command(os.Args[0], "-test.run=^$"), done: make(chan struct{})}
	q.cmd.Env = append(os.Environ(), quotaChildEnv+"="+string(b))
	q.cmd.Stderr = os.Stderr
	q.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := q.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(q.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var s quotaSnapshot
			if json.Unmarshal(sc.Bytes(), &s) == nil {
				q.mu.Lock()
				q.last, q.at = s, time.Now()
				q.mu.Unlock()
			}
		}
		_ = q.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = q.cmd.Process.Kill()
		<-q.done
	})
	return q
}

// waitQuotaChildren waits for every child's last line, at most until
// deadline.
func waitQuotaChildren(t *testing.T, children []*quotaChild, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for i, q := range children {
		select {
		case <-q.done:
		case <-deadline:
			t.Fatalf("client process %d did not end within %v", i, within)
		}
		if !q.snapshot().Done {
			t.Fatalf("client process %d ended without its last count (%v)", i, q.cmd.ProcessState)
		}
	}
}

// addrsFrom is a child's servers: addrs rotated to start at i.
func addrsFrom(addrs []string, i int) []string {
	i %= len(addrs)
	return append(append([]string{}, addrs[i:]...), addrs[:i]...)
}
