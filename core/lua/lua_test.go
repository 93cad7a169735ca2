package lua

import (
	"strings"
	"testing"
)

// Every script is built whole: no include line is left, and each fragment
// stands in it as often as the script has a path that reads a bucket.
func TestScriptsAreBuiltFromTheFragments(t *testing.T) {
	for _, tt := range []struct {
		name                         string
		src                          string
		clock, refill, judge, charge int
	}{
		{"tokenbucket", TokenBucket(), 1, 2, 1, 1},
		{"concurrency", Concurrency(), 1, 1, 1, 1},
		{"settle", Settle(), 1, 1, 0, 0},
		{"reserve", Reserve(), 1, 2, 0, 0},
	} {
		if strings.Contains(tt.src, includeMark) {
			t.Errorf("%s: an include line is left in the built script", tt.name)
		}
		if n := strings.Count(tt.src, "-- fragment clock:"); n != tt.clock {
			t.Errorf("%s: the clock fragment stands %d times, want %d", tt.name, n, tt.clock)
		}
		if n := strings.Count(tt.src, "-- fragment refill:"); n != tt.refill {
			t.Errorf("%s: the refill fragment stands %d times, want %d", tt.name, n, tt.refill)
		}
		if n := strings.Count(tt.src, "-- fragment judge:"); n != tt.judge {
			t.Errorf("%s: the judge fragment stands %d times, want %d", tt.name, n, tt.judge)
		}
		if n := strings.Count(tt.src, "-- fragment charge:"); n != tt.charge {
			t.Errorf("%s: the charge fragment stands %d times, want %d", tt.name, n, tt.charge)
		}
		// the refill's arithmetic, written nowhere but in the fragment
		if n := strings.Count(tt.src, "(now - last) * rate / 1000000"); n != tt.refill {
			t.Errorf("%s: the refill formula stands %d times, want %d (only the fragment's)", tt.name, n, tt.refill)
		}
	}
}

// An include line takes the line's indentation; an unknown name is left.
func TestBuildIndentsAndLeavesUnknownNames(t *testing.T) {
	src := "a\n  -- #include clock\n-- #include nothing\nb\n"
	got := build(src)
	for line := range strings.Lines(clockSrc) {
		if want := "  " + line; strings.TrimSpace(line) != "" && !strings.Contains(got, want) {
			t.Fatalf("built %q lacks %q", got, want)
		}
	}
	if !strings.HasPrefix(got, "a\n  -- fragment clock:") || !strings.HasSuffix(got, "-- #include nothing\nb\n") {
		t.Errorf("built:\n%s", got)
	}
}
