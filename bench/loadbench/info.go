package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// serverCPU is used_cpu_sys + used_cpu_user, in seconds.
func serverCPU(ctx context.Context, c *redis.Client) (float64, error) {
	s, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, ok := field(s, f)
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
	v, ok := field(s, name)
	if !ok {
		return "", fmt.Errorf("INFO %s has no %s", section, name)
	}
	return v, nil
}

func field(info, name string) (string, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v, true
		}
	}
	return "", false
}

func usedMemory(ctx context.Context, c *redis.Client) (int64, error) {
	v, err := infoField(ctx, c, "memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}
