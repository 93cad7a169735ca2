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
	if v := getenv("TOLLGATE_RLQS_TTL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_RLQS_TTL: want whole seconds (as 6s), got %q", v)
		}
		if _, err := rls.NewQuotaService(lim, client, rls.WithAssignmentTTL(d)); err != nil {
			return nil, fmt.Errorf("TOLLGATE_RLQS_TTL: %w", err)
		}
		opts = append(opts, rls.WithAssignmentTTL(d))
	}
	if v := getenv("TOLLGATE_RLQS_IDLE_REPORTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, fmt.Errorf("TOLLGATE_RLQS_IDLE_REPORTS: want a count (as 3), got %q", v)
		}
		if _, err := rls.NewQuotaService(lim, client, rls.WithIdleReports(n)); err != nil {
			return nil, fmt.Errorf("TOLLGATE_RLQS_IDLE_REPORTS: %w", err)
		}
		opts = append(opts, rls.WithIdleReports(n))
	}
	return rls.NewQuotaService(lim, client, opts...)
}
