// Package localredis reads the Redis server's own figures (INFO) that the
// load drivers in this module report. The drivers' private servers come
// from internal/redistest's StartServer, the tree's one redis-server
// start-up.
package localredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CPU is the server's used_cpu_sys + used_cpu_user, in seconds.
func CPU(ctx context.Context, c redis.UniversalClient) (float64, error) {
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, ok := Field(s, f)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s", f)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, err
		}
		total += x
	}
	return total, nil
}

// Field returns the value of name in the text of an INFO reply.
func Field(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}
