// Package names holds the rules for the names that travel into Redis keys,
// headers and logs (tenant IDs, bucket names) and their escaping, shared by
// packages core, quota and keys so that there is one definition of each.
package names

import (
	"fmt"
	"strings"

	"github.com/tollgate-go/tollgate/core/internal/errs"
)

// MaxTenantIDLen is the longest tenant ID accepted, in bytes.
const MaxTenantIDLen = 256

// MaxNameLen is the longest bucket (class) name.
const MaxNameLen = 64

// ValidateTenantID reports an empty or over-long tenant ID, wrapping
// errs.InvalidRequest.
func ValidateTenantID(id string) error {
	if id == "" {
		return fmt.Errorf("%w: tenant ID is empty", errs.InvalidRequest)
	}
	if len(id) > MaxTenantIDLen {
		return fmt.Errorf("%w: tenant ID is %d bytes, longer than %d", errs.InvalidRequest, len(id), MaxTenantIDLen)
	}
	return nil
}

// Escape returns s with every byte that NeedsEscape written as %XX. The
// mapping is injective and its output is printable ASCII without { } : * ?
// [ ] \ or space.
func Escape(s string) string {
	for i := 0; i < len(s); i++ {
		if NeedsEscape(s[i]) {
			var b strings.Builder
			b.Grow(len(s) + 8)
			WriteEscaped(&b, s)
			return b.String()
		}
	}
	return s
}

const hexDigits = "0123456789ABCDEF"

// WriteEscaped writes Escape(s) to b.
func WriteEscaped(b *strings.Builder, s string) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if NeedsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

// NeedsEscape reports whether c is escaped in a key, a log line or a
// header value.
func NeedsEscape(c byte) bool {
	if c <= ' ' || c >= 0x7f {
		return true
	}
	switch c {
	case '{', '}', ':', '%', '*', '?', '[', ']', '\\', '"':
		return true
	}
	return false
}

// TenantPattern returns a SCAN MATCH pattern for every key of tenantID
// under prefix.
func TenantPattern(prefix, tenantID string) (string, error) {
	if err := ValidateTenantID(tenantID); err != nil {
		return "", err
	}
	return prefix + ":{" + Escape(tenantID) + "}:*", nil
}
