package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/bench/internal/localredis"
)

// redisCost is what Redis spent while some work ran: CPU seconds
// (used_cpu_sys+user), and the microseconds spent in script commands and the
// number of script calls (commandStats).
type redisCost struct{ cpu, usec, calls float64 }

// redisSpent resets Redis's command statistics (CONFIG RESETSTAT), runs work
// and returns what Redis spent meanwhile.
func redisSpent(ctx context.Context, c *redis.Client, work func() error) (redisCost, error) {
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		return redisCost{}, err
	}
	cpu0, err := localredis.CPU(ctx, c)
	if err != nil {
		return redisCost{}, err
	}
	if err := work(); err != nil {
		return redisCost{}, err
	}
	cpu1, err := localredis.CPU(ctx, c)
	if err != nil {
		return redisCost{}, err
	}
	usec, calls, err := commandStats(ctx, c)
	if err != nil {
		return redisCost{}, err
	}
	return redisCost{cpu: cpu1 - cpu0, usec: usec, calls: calls}, nil
}

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
