// Package names holds the limits of the names that travel into Redis keys,
// headers and logs (tenant IDs, bucket names) and their escaping, shared by
// packages quota and keys so that there is one definition of each. The key
// scheme itself, and the tenant-ID check, are package keys'.
package names

import "strings"

// MaxTenantIDLen is the longest tenant ID accepted, in bytes.
const MaxTenantIDLen = 256

// MaxNameLen is the longest bucket (class) name.
const MaxNameLen = 64

// Escape returns s with every byte that NeedsEscape written as %XX. The
// mapping is injective and its output is printable ASCII without { } : * ?
// [ ] \ or space.
func Escape(s string) string {
	n := EscapedLen(s)
	if n == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(n)
	WriteEscaped(&b, s)
	return b.String()
}

// escaped[c] is NeedsEscape(c), compiled into a table once so that a key
// is written without a call per byte.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = NeedsEscape(byte(c))
	}
	return t
}()

const hexDigits = "0123456789ABCDEF"

// EscapedLen returns len(Escape(s)) without writing it.
func EscapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if escaped[s[i]] {
			n += 2
		}
	}
	return n
}

// WriteEscaped writes Escape(s) to b. It is the one escape writer: keys,
// log lines and error texts all escape through it.
func WriteEscaped(b *strings.Builder, s string) {
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
