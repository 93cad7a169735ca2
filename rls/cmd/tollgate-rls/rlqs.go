package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/rls"
)

// quotaService is the rate limit quota service (RLQS) served beside
// ShouldRateLimit on the gRPC port, configured by TOLLGATE_RLQS_TTL (the
// assignments' TTL, whole seconds) and TOLLGATE_RLQS_IDLE_REPORTS.
func quotaService(lim *core.Limiter, client redis.UniversalClient, getenv func(string) string, log *slog.Logger) (*rls.QuotaService, error) {
	opts := []rls.QuotaOption{rls.WithQuotaErrorHandler(func(ctx context.Context, err error) {
		log.WarnContext(ctx, "tollgate-rls: quota stream", "err", err)
	})}
	for _, e := range []struct {
		name, want string
		parse      func(string) (rls.QuotaOption, error)
	}{
		{"TOLLGATE_RLQS_TTL", "whole seconds (as 6s)", func(v string) (rls.QuotaOption, error) {
			d, err := time.ParseDuration(v)
			return rls.WithAssignmentTTL(d), err
		}},
		{"TOLLGATE_RLQS_IDLE_REPORTS", "a count (as 3)", func(v string) (rls.QuotaOption, error) {
			n, err := strconv.Atoi(v)
			return rls.WithIdleReports(n), err
		}},
	} {
		v := getenv(e.name)
		if v == "" {
			continue
		}
		o, err := e.parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: want %s, got %q", e.name, e.want, v)
		}
		// each option alone, so that the error names the variable
		if _, err := rls.NewQuotaService(lim, client, o); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		opts = append(opts, o)
	}
	return rls.NewQuotaService(lim, client, opts...)
}
