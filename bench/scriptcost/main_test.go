package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestTotalsReadsTheFirstEvent(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		body string
		want float64
		ok   bool
	}{
		{"version: 1\nevents: Ir\nfn=main\n0 5\nsummary: 281323568\ntotals: 281323568\n", 281323568, true},
		{"events: Ir Dr\ntotals: 10 20\n", 10, true},
		{"events: Ir\nfn=main\n", 0, false},
	} {
		p := filepath.Join(dir, "out")
		if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := totals(p)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("totals(%q) = %v, %v; want %v, ok %v", c.body, got, err, c.want, c.ok)
		}
	}
}

func TestMedian(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Fatalf("median = %v, want 2", m)
	}
	if m := median(nil); m != 0 {
		t.Fatalf("median of nothing = %v, want 0", m)
	}
}
