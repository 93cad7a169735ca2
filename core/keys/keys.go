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

// Keys builds the Redis keys of a limiter. It is the only place in tollgate
// where a key is made, so every service and adapter writes the same keys.
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

// Bucket returns the key of tenantID's bucket. It fails, wrapping
// [errs.InvalidRequest], when tenantID is empty or longer than quota.MaxTenantIDLen,
// or bucket is not a valid name.
//
// It is on every check's path: it sizes the key exactly (one allocation,
// however many bytes are escaped), then writes it, with the escape table;
// it calls out of this file only to word an error.
func (k Keys) Bucket(tenantID, bucket string) (string, error) {
	if tenantID == "" || len(tenantID) > names.MaxTenantIDLen {
		return "", names.ValidateTenantID(tenantID)
	}
	if bucket == "" || len(bucket) > names.MaxNameLen {
		return "", fmt.Errorf("%w: bucket name must be 1 to %d bytes, got %d", errs.InvalidRequest, names.MaxNameLen, len(bucket))
	}
	var b strings.Builder
	b.Grow(len(k.prefix) + len(":{") + escapedLen(tenantID) + len("}:") + escapedLen(bucket))
	b.WriteString(k.prefix)
	b.WriteString(":{")
	writeEscaped(&b, tenantID)
	b.WriteString("}:")
	writeEscaped(&b, bucket)
	return b.String(), nil
}

// escaped[c] reports whether byte c of a tenant ID or a bucket name is
// written as %XX in a key: names.NeedsEscape, the one definition of the
// rule, compiled into a table once so that a key is written without a call
// per byte.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = names.NeedsEscape(byte(c))
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// escapedLen returns the length of s escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] {
			n += 2
		}
	}
	return n
}

// writeEscaped writes s escaped (names.Escape(s)) to b.
func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if escaped[c] {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// Slots returns the key of the concurrency slots of tenantID's bucket (a
// sorted set of deadlines, see https://github.com/tollgate-go/tollgate/blob/main/docs/semantics.md#concurrency-limits): the bucket's key and
// ":slots". A bucket name holds no ':', so it never names a bucket, and it
// carries the same hash tag. It fails as Bucket does.
func (k Keys) Slots(tenantID, bucket string) (string, error) {
	key, err := k.Bucket(tenantID, bucket)
	if err != nil {
		return "", err
	}
	return key + slotsSuffix, nil
}

const slotsSuffix = ":slots"

// EscapeID returns s with every byte that is not safe in a key, a log line or
// a header value written as %XX. The mapping is injective and its output is
// printable ASCII without { } : * ? [ ] \ or space. Use it whenever a tenant
// ID leaves the process.
func EscapeID(s string) string {
	return names.Escape(s)
}
