package ints

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse("1, 16,64")
	if err != nil || !slices.Equal(got, []int{1, 16, 64}) {
		t.Errorf("Parse = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "16,", "x", "1.5"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}
