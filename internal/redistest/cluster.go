package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a local Redis Cluster of private servers.
type Cluster struct {
	// Nodes holds the servers, masters first.
	Nodes []*Server
	// Masters is the number of masters; the rest are replicas.
	Masters int
}

// Addrs returns every node's host:port.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		a[i] = n.Addr()
	}
	return a
}

// Client returns a new ClusterClient, closed when t ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

var (
	sharedClusterOnce sync.Once
	sharedCluster     *Cluster
	sharedClusterErr  error
	// background counts start-ups still running, which Shutdown waits for
	background sync.WaitGroup
)

// StartSharedCluster begins starting the package's shared 3-master cluster
// in the background, so that its start-up (about 2 s) overlaps other tests.
// Call it from TestMain; SharedCluster waits for it.
func StartSharedCluster() {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return
	}
	background.Add(1)
	go func() {
		defer background.Done()
		sharedClusterOnce.Do(startSharedCluster)
	}()
}

func startSharedCluster() {
	sharedCluster, sharedClusterErr = startCluster(3, 0)
	if sharedCluster != nil {
		atExit(sharedCluster.shutdown)
	}
}

// SharedCluster returns a client of the package's shared 3-master Redis
// Cluster, started once and stopped by [Main]. Tests isolate with [Prefix].
func SharedCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	needBinary(t, "a Redis Cluster")
	sharedClusterOnce.Do(startSharedCluster)
	if sharedClusterErr != nil {
		t.Fatalf("redistest: cluster: %v", sharedClusterErr)
	}
	return sharedCluster.Client(t)
}

// NewCluster starts a private cluster of masters masters with replicas
// replicas each, stopped when t ends. Use it for tests that kill nodes.
// extra are more redis-server arguments for every node, kept across
// [Server.Restart]; e.g. "--appendonly", "yes", "--appendfsync", "always"
// make a killed and restarted node keep every write it acknowledged (its
// data directory and nodes.conf stay).
func NewCluster(t testing.TB, masters, replicas int, extra ...string) *Cluster {
	t.Helper()
	needBinary(t, "a Redis Cluster")
	c, err := startCluster(masters, replicas, extra...)
	if err != nil {
		t.Fatalf("redistest: cluster: %v", err)
	}
	t.Cleanup(c.shutdown)
	return c
}

func startCluster(masters, replicas int, extra ...string) (*Cluster, error) {
	c := &Cluster{Masters: masters}
	for range masters * (1 + replicas) {
		// replicas sync at once and may always fail over: a test kills
		// masters seconds after start-up
		args := []string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
			"--cluster-config-file", "nodes.conf", "--repl-diskless-sync-delay", "0",
			"--cluster-replica-validity-factor", "0"}
		s, err := startServer(append(args, extra...))
		if err != nil {
			c.shutdown()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		c.shutdown()
		return nil, fmt.Errorf("redis-cli (needed to create a cluster): %w", err)
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		c.shutdown()
		return nil, fmt.Errorf("redis-cli --cluster create: %w: %s", err, out)
	}
	if err := c.waitWritable(20 * time.Second); err != nil {
		c.shutdown()
		return nil, err
	}
	return c, nil
}

// waitWritable waits until every node reports cluster_state:ok and a write
// to every master's slots succeeds.
func (c *Cluster) waitWritable(within time.Duration) error {
	deadline := time.Now().Add(within)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	defer cc.Close()
	for {
		err := c.ready(cc)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not writable within %v: %w", within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) ready(cc *redis.ClusterClient) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		info, err := nc.ClusterInfo(ctx).Result()
		var repl string
		if err == nil {
			repl, err = nc.Info(ctx, "replication").Result()
		}
		_ = nc.Close()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return fmt.Errorf("node %s: cluster_state not ok", n.Addr())
		}
		// a replica must have synced, or it could not take over its master
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return fmt.Errorf("replica %s: not in sync yet", n.Addr())
		}
	}
	cc.ReloadState(ctx)
	// one key per master ({a}, {b}, {c} land on different slots)
	for _, tag := range []string{"a", "b", "c", "d", "e"} {
		if err := cc.Set(ctx, "redistest:{"+tag+"}:probe", "1", time.Second).Err(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) shutdown() {
	for _, n := range c.Nodes {
		n.shutdown()
	}
}

// Master returns the i-th node that is a master now (ROLE), in node order.
func (c *Cluster) Master(t testing.TB, i int) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
		role, err := nc.Do(ctx, "ROLE").Slice()
		_ = nc.Close()
		if err != nil || len(role) == 0 || role[0] != "master" {
			continue
		}
		if i == 0 {
			return n
		}
		i--
	}
	t.Fatalf("redistest: cluster has no master number %d", i)
	return nil
}
