package core

import "context"

// Tenant is the verified identity a request is limited under. The auth layer
// sets it (from a verified token or session) with [ContextWithTenant]; the
// adapters read it with [TenantFromContext]. It is never taken from a header
// the client sets: a client that chooses its own key chooses its own quota.
type Tenant struct {
	// ID names the tenant. It may hold any bytes (1 to MaxTenantIDLen of
	// them); the key scheme escapes what Redis Cluster or a log would
	// misread. IDs beginning with "anonymous:" are kept for the Gate's
	// anonymous callers: Gate.Decide refuses a verified tenant spelled so.
	ID string
	// Tier selects the tenant's default quotas (for example "free" or
	// "pro"). Empty means the resolver's default tier.
	Tier string
}

type tenantKey struct{}

// ContextWithTenant returns a copy of ctx that carries t. Call it in the
// authentication middleware, after the token has been verified.
func ContextWithTenant(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// TenantFromContext returns the tenant stored by [ContextWithTenant], and
// false when there is none or its ID is empty.
func TenantFromContext(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(tenantKey{}).(Tenant)
	if !ok || t.ID == "" {
		return Tenant{}, false
	}
	return t, true
}
