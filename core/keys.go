package core

import (
	"fmt"
	"github.com/tollgate-go/tollgate/core/internal/names"
	"strings"
)

// DefaultPrefix is the key prefix used unless [WithPrefix] says otherwise.
const DefaultPrefix = "rl"

// MaxTenantIDLen is the longest tenant ID accepted, in bytes.
const MaxTenantIDLen = 256

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

// NewKeys returns the key scheme for prefix, which must be 1 to 64 bytes of
// printable ASCII without { } * ? [ ] \ or space.
func NewKeys(prefix string) (Keys, error) {
	if prefix == "" || len(prefix) > 64 {
		return Keys{}, fmt.Errorf("%w: key prefix must be 1 to 64 bytes, got %d", ErrInvalidConfig, len(prefix))
	}
	for i := 0; i < len(prefix); i++ {
		if c := prefix[i]; c != ':' && needsEscape(c) {
			return Keys{}, fmt.Errorf("%w: key prefix %q has byte %q at %d", ErrInvalidConfig, prefix, c, i)
		}
	}
	return Keys{prefix: prefix}, nil
}

// Prefix returns the key prefix.
func (k Keys) Prefix() string { return k.prefix }

// Bucket returns the key of tenantID's bucket. It fails, wrapping
// [ErrInvalidRequest], when tenantID is empty or longer than MaxTenantIDLen,
// or bucket is not a valid name.
func (k Keys) Bucket(tenantID, bucket string) (string, error) {
	if err := validateTenantID(tenantID); err != nil {
		return "", err
	}
	if bucket == "" || len(bucket) > names.MaxNameLen {
		return "", fmt.Errorf("%w: bucket name must be 1 to %d bytes, got %d", ErrInvalidRequest, names.MaxNameLen, len(bucket))
	}
	var b strings.Builder
	b.Grow(len(k.prefix) + len(tenantID) + len(bucket) + 8)
	b.WriteString(k.prefix)
	b.WriteString(":{")
	writeEscaped(&b, tenantID)
	b.WriteString("}:")
	writeEscaped(&b, bucket)
	return b.String(), nil
}

// Slots returns the key of the concurrency slots of tenantID's bucket (a
// sorted set of deadlines, see docs/semantics.md): the bucket's key and
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

// tenantPattern returns a SCAN MATCH pattern for every bucket of tenantID.
func (k Keys) tenantPattern(tenantID string) (string, error) {
	if err := validateTenantID(tenantID); err != nil {
		return "", err
	}
	return k.prefix + ":{" + EscapeID(tenantID) + "}:*", nil
}

func validateTenantID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: tenant ID is empty", ErrInvalidRequest)
	}
	if len(id) > MaxTenantIDLen {
		return fmt.Errorf("%w: tenant ID is %d bytes, longer than %d", ErrInvalidRequest, len(id), MaxTenantIDLen)
	}
	return nil
}

// EscapeID returns s with every byte that is not safe in a key, a log line or
// a header value written as %XX. The mapping is injective and its output is
// printable ASCII without { } : * ? [ ] \ or space. Use it whenever a tenant
// ID leaves the process.
func EscapeID(s string) string {
	for i := 0; i < len(s); i++ {
		if needsEscape(s[i]) {
			var b strings.Builder
			b.Grow(len(s) + 8)
			writeEscaped(&b, s)
			return b.String()
		}
	}
	return s
}

const hexDigits = "0123456789ABCDEF"

func writeEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

func needsEscape(c byte) bool {
	if c <= ' ' || c >= 0x7f {
		return true
	}
	switch c {
	case '{', '}', ':', '%', '*', '?', '[', ']', '\\', '"':
		return true
	}
	return false
}
