package transport

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// refreshTopology asks a Cluster client to reload its slot map after a
// failed store call. go-redis reloads on MOVED, but a master that died does
// not answer MOVED: until its replica's promotion is learned, every call for
// its slots would go to the dead address (for up to
// ClusterStateReloadInterval, 60 s by default). The reload is lazy and
// de-duplicated by go-redis, so calling it on every failure is cheap.
func refreshTopology(c redis.UniversalClient, err error) {
	cc, ok := c.(*redis.ClusterClient)
	if !ok || err == nil {
		return
	}
	var re redis.Error
	if errors.As(err, &re) && !errors.Is(err, context.DeadlineExceeded) &&
		!strings.HasPrefix(re.Error(), "CLUSTERDOWN") && !strings.HasPrefix(re.Error(), "TRYAGAIN") {
		return // the server answered: the topology is not at fault
	}
	cc.ReloadState(context.Background())
}
