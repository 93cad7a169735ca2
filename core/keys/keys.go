// Package keys is tollgate's Redis key scheme, shared by the limiter, the
// tollgate CLI and the override store so that there is one definition of a
// key.
package keys

import (
	"fmt"
	"strings"

	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/names"
)

// Keys builds the Redis keys of a limiter: a bucket's, its slots', and the
// pattern over all of a tenant's. It is the only place in tollgate where a
// key is made, so every service and adapter writes the same keys.
//
// A bucket key is
//
//	<prefix>:{<tenant>}:<bucket>
//
// The braces are a Redis Cluster hash tag: only the tenant is hashed, so all
// of a tenant's buckets share one slot and one script can check them
// together. The tenant and bucket parts are escaped: every byte outside
// printable ASCII, and each of { } : % * ? [ ] \ " and space, becomes %XX
// (upper-case hex). So the hash tag is always exactly the tenant, a glob
// pattern over a tenant's keys matches no other tenant's, and two different
// (tenant, bucket) pairs never produce the same key.
type Keys struct {
	prefix string
}

// New returns the key scheme for prefix, which must be 1 to 64 bytes of
// printable ASCII without { } * ? [ ] \ or space.
func New(prefix string) (Keys, error) {
	if prefix == "" || len(prefix) > 64 {
		return Keys{}, fmt.Errorf("%w: key prefix must be 1 to 64 bytes, got %d", errs.InvalidConfig, len(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c != ':' && names.NeedsEscape(c) {
			return Keys{}, fmt.Errorf("%w: key prefix %q has byte %q at %d", errs.InvalidConfig, prefix, c, i)
		}
	}
	return Keys{prefix: prefix}, nil
}

// Prefix returns the key prefix.
func (k Keys) Prefix() string { return k.prefix }

// ValidateTenantID reports an empty tenant ID, or one longer than
// quota.MaxTenantIDLen, wrapping [errs.InvalidRequest] (core.ErrInvalidRequest).
// It is the one tenant-ID check: the limiter, the key scheme and the
// override store all refuse a tenant ID with it.
func ValidateTenantID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: tenant ID is empty", errs.InvalidRequest)
	}
	if len(id) > names.MaxTenantIDLen {
		return fmt.Errorf("%w: tenant ID is %d bytes, longer than %d", errs.InvalidRequest, len(id), names.MaxTenantIDLen)
	}
	return nil
}

// Bucket returns the key of tenantID's bucket. It fails, wrapping
// [errs.InvalidRequest], when tenantID is empty or longer than quota.MaxTenantIDLen,
// or bucket is not a valid name.
//
// It is on every check's path: it sizes the key exactly (one allocation,
// however many bytes are escaped), then writes it.
func (k Keys) Bucket(tenantID, bucket string) (string, error) {
	return k.key(tenantID, bucket, "")
}

// Slots returns the key of the concurrency slots of tenantID's bucket (a
// sorted set of deadlines, see https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#concurrency-limits): the bucket's key and
// ":slots". A bucket name holds no ':', so it never names a bucket, and it
// carries the same hash tag. It fails as Bucket does, and allocates as
// Bucket does, once.
func (k Keys) Slots(tenantID, bucket string) (string, error) {
	return k.key(tenantID, bucket, slotsSuffix)
}

const slotsSuffix = ":slots"

// Settled returns the key that marks reservation id of tenantID's bucket
// settled (core.Limiter.Settle): the bucket's key, ":settled:" and id. It
// carries the bucket's hash tag, so a settle's script declares it with the
// buckets on a Cluster. id must be 1 to 64 bytes of [0-9a-z]; otherwise it
// fails, as Bucket does for a bad tenant or bucket.
func (k Keys) Settled(tenantID, bucket, id string) (string, error) {
	if id == "" || len(id) > 64 || strings.IndexFunc(id, func(r rune) bool { return (r < '0' || r > '9') && (r < 'a' || r > 'z') }) >= 0 {
		return "", fmt.Errorf("%w: reservation id must be 1 to 64 bytes of [0-9a-z], got %q", errs.InvalidRequest, id)
	}
	return k.key(tenantID, bucket, settledInfix+id)
}

const settledInfix = ":settled:"

// Reserved returns the key that holds the time of act of the latest
// reservation of tenantID's bucket (core.Limiter.Reserve): the bucket's key
// and ":reserved", with its hash tag. It fails as Bucket does.
func (k Keys) Reserved(tenantID, bucket string) (string, error) {
	return k.key(tenantID, bucket, reservedSuffix)
}

const reservedSuffix = ":reserved"

// Demand returns the key of the demand record of tenantID's bucket: what
// each gateway sharing the bucket through a quota stream last reported
// asking for. It is the bucket's key and ":demand", in the bucket's hash
// slot; it fails and allocates as Bucket does.
func (k Keys) Demand(tenantID, bucket string) (string, error) {
	return k.key(tenantID, bucket, demandSuffix)
}

const demandSuffix = ":demand"

// key writes <prefix>:{<tenant>}:<bucket><suffix>, sized exactly.
func (k Keys) key(tenantID, bucket, suffix string) (string, error) {
	if tenantID == "" || len(tenantID) > names.MaxTenantIDLen {
		return "", ValidateTenantID(tenantID)
	}
	if bucket == "" || len(bucket) > names.MaxNameLen {
		return "", fmt.Errorf("%w: bucket name must be 1 to %d bytes, got %d", errs.InvalidRequest, names.MaxNameLen, len(bucket))
	}
	var b strings.Builder
	b.Grow(len(k.prefix) + len(":{") + names.EscapedLen(tenantID) + len("}:") + names.EscapedLen(bucket) + len(suffix))
	b.WriteString(k.prefix)
	b.WriteString(":{")
	names.WriteEscaped(&b, tenantID)
	b.WriteString("}:")
	names.WriteEscaped(&b, bucket)
	b.WriteString(suffix)
	return b.String(), nil
}

// TenantPattern returns a SCAN MATCH pattern for every key of tenantID: its
// buckets and their slots. The escaping leaves no glob byte in the tenant,
// so the pattern matches no other tenant's keys, and its hash tag is the
// tenant's, so on a Cluster every key it matches is in one slot. It fails
// as ValidateTenantID does.
func (k Keys) TenantPattern(tenantID string) (string, error) {
	if err := ValidateTenantID(tenantID); err != nil {
		return "", err
	}
	return k.prefix + ":{" + names.Escape(tenantID) + "}:*", nil
}

// EscapeID returns s with every byte that is not safe in a key, a log line or
// a header value written as %XX. The mapping is injective and its output is
// printable ASCII without { } : * ? [ ] \ or space. Use it whenever a tenant
// ID leaves the process.
func EscapeID(s string) string {
	return names.Escape(s)
}
