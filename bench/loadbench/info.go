package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/bench/internal/localredis"
)

// commandStats returns the microseconds spent in script commands (and the
// commands they call, which Redis counts inside the script's time) and the
// number of script calls since CONFIG RESETSTAT.
func commandStats(ctx context.Context, c *redis.Client) (usec, calls float64, err error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		cmd := strings.TrimPrefix(name, "cmdstat_")
		if cmd != "evalsha" && cmd != "eval" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls += x
			case "usec":
				usec += x
			}
		}
	}
	return usec, calls, nil
}

func infoField(ctx context.Context, c *redis.Client, section, name string) (string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	v, ok := localredis.Field(s, name)
	if !ok {
		return "", fmt.Errorf("INFO %s has no %s", section, name)
	}
	return v, nil
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	v, err := infoField(ctx, c, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}
