// Package stats holds the load drivers' summary statistics.
package stats

import (
	"math"
	"slices"
)

// Median is the median of xs (the mean of the two middle values when
// their number is even), NaN for none; xs is not reordered.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
