package keys

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/internal/names"
)

func TestKeys(t *testing.T) {
	k, err := New("rl")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ tenant, bucket, want string }{
		{"t42", "default", "rl:{t42}:default"},
		{"a{b}c", "export", "rl:{a%7Bb%7Dc}:export"},
		{"a:b", "x", "rl:{a%3Ab}:x"},
		{"50%", "x", "rl:{50%25}:x"},
		{"sp ace\x00\xff", "x", "rl:{sp%20ace%00%FF}:x"},
		{"glob*?[]\\", "x", "rl:{glob%2A%3F%5B%5D%5C}:x"},
		{"ünï", "x", "rl:{%C3%BCn%C3%AF}:x"},
	}
	for _, tt := range tests {
		got, err := k.Bucket(tt.tenant, tt.bucket)
		if err != nil || got != tt.want {
			t.Errorf("Bucket(%q, %q) = %q, %v; want %q", tt.tenant, tt.bucket, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", strings.Repeat("x", names.MaxTenantIDLen+1)} {
		if _, err := k.Bucket(bad, "x"); err == nil {
			t.Errorf("tenant of %d bytes accepted", len(bad))
		}
	}
	if _, err := k.Bucket(strings.Repeat("x", names.MaxTenantIDLen), "x"); err != nil {
		t.Errorf("tenant of %d bytes refused: %v", names.MaxTenantIDLen, err)
	}
	for _, bad := range []string{"", "a{b", "a}", "a b", "a*", strings.Repeat("p", 65)} {
		if _, err := New(bad); err == nil {
			t.Errorf("prefix %q accepted", bad)
		}
	}
	if k2, err := New("svc:rl"); err != nil || k2.Prefix() != "svc:rl" {
		t.Errorf("prefix with ':' refused: %v", err)
	}
}

// A bucket's slots key is its key and ":slots", in the tenant's slot, under
// the tenant's pattern; bad input fails as Bucket fails.
func TestDemandKeyIsTheBucketKeyAndDemand(t *testing.T) {
	k, err := New("tg")
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"acme", "a:b{c}"} {
		bk, _ := k.Bucket(tenant, "export")
		dk, err := k.Demand(tenant, "export")
		if err != nil || dk != bk+":demand" {
			t.Errorf("Demand(%q) = %q, %v; want %q", tenant, dk, err, bk+":demand")
		}
	}
	if _, err := k.Demand("", "export"); err == nil {
		t.Error("Demand of an empty tenant: no error")
	}
}

func TestSlotsKeyIsTheBucketKeyAndSlots(t *testing.T) {
	k, err := New("rl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"t42", "acme:eu{1}", "*"} {
		bk, err := k.Bucket(tenant, "export")
		if err != nil {
			t.Fatal(err)
		}
		sk, err := k.Slots(tenant, "export")
		if err != nil || sk != bk+":slots" {
			t.Errorf("Slots(%q) = %q, %v; want %q", tenant, sk, err, bk+":slots")
		}
		p, err := k.TenantPattern(tenant)
		if err != nil || p != "rl:{"+EscapeID(tenant)+"}:*" || hashTag(p) != hashTag(sk) {
			t.Errorf("TenantPattern(%q) = %q, %v", tenant, p, err)
		}
	}
	for _, bad := range [][2]string{{"", "x"}, {"t", ""}, {strings.Repeat("x", names.MaxTenantIDLen+1), "x"}} {
		_, berr := k.Bucket(bad[0], bad[1])
		_, serr := k.Slots(bad[0], bad[1])
		if berr == nil || serr == nil || berr.Error() != serr.Error() {
			t.Errorf("Slots(%q, %q) error %v, Bucket's %v", bad[0], bad[1], serr, berr)
		}
	}
	if _, err := k.TenantPattern(""); err == nil {
		t.Error("TenantPattern of an empty tenant ID accepted")
	}
}

// hashTag returns the text Redis Cluster hashes: between the first '{' and
// the next '}', when that is non-empty; else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// unescape inverts writeEscaped.
func unescape(t *testing.T, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 >= len(s) {
				t.Fatalf("truncated escape in %q", s)
			}
			h := strings.IndexByte("0123456789ABCDEF", s[i+1])
			l := strings.IndexByte("0123456789ABCDEF", s[i+2])
			if h < 0 || l < 0 {
				t.Fatalf("bad escape in %q", s)
			}
			b.WriteByte(byte(h<<4 | l))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzKeys proves the key scheme's two properties for any input: the hash tag
// is exactly the (escaped) tenant, and the key decodes back to its (tenant,
// bucket), so distinct pairs never share a key.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"t42", "{", "}", "{}", "a:b", "%", "%25", "\x00", "\xff\xfe", "a}b{c", strings.Repeat("{", 256)} {
		f.Add(s, "default")
	}
	f.Add("t", "a:b}")
	k, _ := New("rl:v1")
	f.Fuzz(func(t *testing.T, tenant, bucket string) {
		key, err := k.Bucket(tenant, bucket)
		if err != nil {
			if tenant != "" && len(tenant) <= names.MaxTenantIDLen && bucket != "" && len(bucket) <= names.MaxNameLen {
				t.Fatalf("Bucket(%q, %q): %v", tenant, bucket, err)
			}
			return
		}
		if !utf8.ValidString(key) {
			t.Fatalf("key %q is not valid UTF-8", key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] >= 0x7f {
				t.Fatalf("key %q has unprintable byte %q", key, key[i])
			}
		}
		if got := hashTag(key); got != EscapeID(tenant) || unescape(t, got) != tenant {
			t.Fatalf("hash tag of %q = %q, want the tenant %q", key, got, tenant)
		}
		rest, ok := strings.CutPrefix(key, "rl:v1:{"+EscapeID(tenant)+"}:")
		if !ok || unescape(t, rest) != bucket || strings.ContainsAny(rest, "{}:") {
			t.Fatalf("key %q does not decode to bucket %q", key, bucket)
		}
		p, err := k.TenantPattern(tenant)
		if err != nil || !strings.HasPrefix(key, strings.TrimSuffix(p, "*")) || strings.ContainsAny(strings.TrimSuffix(p, "*")[len("rl:v1:"):], "*?[]\\") {
			t.Fatalf("pattern %q for key %q: %v", p, key, err)
		}
	})
}

// BenchmarkBucket: the key of one check's bucket, a plain tenant ID and one
// that needs escaping.
func BenchmarkBucket(b *testing.B) {
	k, err := New("rl")
	if err != nil {
		b.Fatal(err)
	}
	for _, tenant := range []string{"t42", "acme:eu-west {prod}"} {
		b.Run(EscapeID(tenant), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := k.Bucket(tenant, "default"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The key scheme writes names.Escape's escaping and refuses the tenant IDs
// ValidateTenantID refuses, with its error: its escape table and
// length check are names' rules compiled, not a second definition.
func TestBucketAgreesWithNames(t *testing.T) {
	k, err := New("rl")
	if err != nil {
		t.Fatal(err)
	}
	for c := 0; c < 256; c++ {
		s := "a" + string([]byte{byte(c)}) + "b"
		key, err := k.Bucket(s, s)
		if want := "rl:{" + names.Escape(s) + "}:" + names.Escape(s); err != nil || key != want {
			t.Errorf("Bucket(%q, %q) = %q, %v; want %q", s, s, key, err, want)
		}
	}
	for _, n := range []int{0, 1, names.MaxTenantIDLen, names.MaxTenantIDLen + 1} {
		id := strings.Repeat("x", n)
		_, err := k.Bucket(id, "default")
		want := ValidateTenantID(id)
		if (err == nil) != (want == nil) || (err != nil && err.Error() != want.Error()) {
			t.Errorf("tenant ID of %d bytes: Bucket's error %v, names' %v", n, err, want)
		}
	}
}

// A key is sized once: one allocation however many bytes are escaped.
func TestBucketAllocatesOnce(t *testing.T) {
	k, err := New("rl")
	if err != nil {
		t.Fatal(err)
	}
	for _, tenant := range []string{"t42", strings.Repeat("{", names.MaxTenantIDLen)} {
		if n := testing.AllocsPerRun(50, func() { _, _ = k.Bucket(tenant, "a:b c") }); n != 1 {
			t.Errorf("Bucket(%d bytes of %q): %v allocations, want 1", len(tenant), tenant[:1], n)
		}
		if n := testing.AllocsPerRun(50, func() { _, _ = k.Slots(tenant, "a:b c") }); n != 1 {
			t.Errorf("Slots(%d bytes of %q): %v allocations, want 1", len(tenant), tenant[:1], n)
		}
	}
}

func TestSettledKeyIsTheBucketKeySettledAndID(t *testing.T) {
	k, err := New("rl")
	if err != nil {
		t.Fatal(err)
	}
	bk, _ := k.Bucket("acme", "llm")
	sk, err := k.Settled("acme", "llm", "0abc9z")
	if err != nil || sk != bk+":settled:0abc9z" {
		t.Fatalf("Settled = %q, %v; want %q", sk, err, bk+":settled:0abc9z")
	}
	if rk, err := k.Reserved("acme", "llm"); err != nil || rk != bk+":reserved" {
		t.Fatalf("Reserved = %q, %v; want %q", rk, err, bk+":reserved")
	}
	for _, id := range []string{"", "ABC", "a:b", "a*", strings.Repeat("a", 65)} {
		if _, err := k.Settled("acme", "llm", id); !errors.Is(err, errs.InvalidRequest) {
			t.Errorf("Settled(id %q): %v, want an invalid request", id, err)
		}
	}
}
