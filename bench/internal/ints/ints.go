// Package ints parses the drivers' comma-separated lists of positive
// counts, such as -conns 16,64.
package ints

import (
	"fmt"
	"strconv"
	"strings"
)

// Parse returns the positive integers of a comma-separated list.
func Parse(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}
