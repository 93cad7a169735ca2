package gate

import (
	"context"

	"github.com/tollgate-go/tollgate/core/quota"
)

type tenantKey struct{}

// ContextWithTenant returns a copy of ctx that carries t. Call it in the
// authentication middleware, after the token has been verified.
func ContextWithTenant(ctx context.Context, t quota.Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFromContext returns the tenant stored by [ContextWithTenant], and
// false when there is none or its ID is empty.
func TenantFromContext(ctx context.Context) (quota.Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(quota.Tenant)
	if !ok || t.ID == "" {
		return quota.Tenant{}, false
	}
	return t, true
}
