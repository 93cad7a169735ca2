package core

import (
	"context"

	"github.com/tollgate-go/tollgate/core/quota"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// metricOverridesLate counts checks a quota.TieredResolver answered with the
// tier defaults because the tenant's overrides were not loaded in time, by
// class, tier and cause: timeout (its first lookup did not answer within
// the check timeout; it goes on in the background and fills the cache for
// the next request) or busy (WithMaxLookups lookups were in flight). Not a
// store failure: the store decides the check, on the tier's quota.
const metricOverridesLate = "tollgate.overrides.late"

func (m *metrics) overridesLate(ctx context.Context, tier, class, cause string) {
	m.overrides.Add(ctx, 1, metric.WithAttributes(
		attribute.String("class", label(class, quota.DefaultClass)),
		attribute.String("tier", label(tier, "none")),
		attribute.String("cause", cause),
	))
}
