package config

import (
	"math"
	"slices"

	"github.com/tollgate-go/tollgate/core/quota"
)

// tierIndex answers the checks of a route against every tier in constant
// time: how many tiers declare a class, its least capacity among them, the
// least ceiling. A file of R routes and T tiers is checked in O(R + the
// tiers' size), not O(R x T); only a route that fails walks the tiers in
// order, to name the first (or each) at fault, and only while errors are
// still reported (maxErrors).
type tierIndex struct {
	names      []string             // the tiers, sorted
	known      int                  // tiers whose class list is known
	classes    map[string]classSpan // by class name
	minCeiling int64                // least ceiling capacity; MaxInt64 when none
}

// classSpan is what the tiers say of one class.
type classSpan struct {
	declared int   // tiers declaring it (a known class list)
	minCap   int64 // least capacity among tiers giving it a quota; MaxInt64 when none
}

// newTierIndex indexes tiers. declared gives a tier's declared class names
// and whether they are known (nil: each tier's quotas' names, all known).
func newTierIndex(tiers map[string]quota.Tier, declared func(tier string) (map[string]bool, bool)) *tierIndex {
	x := &tierIndex{names: make([]string, 0, len(tiers)), classes: map[string]classSpan{}, minCeiling: math.MaxInt64}
	span := func(class string) classSpan {
		if s, ok := x.classes[class]; ok {
			return s
		}
		return classSpan{minCap: math.MaxInt64}
	}
	for tn, t := range tiers {
		x.names = append(x.names, tn)
		if t.Ceiling != nil {
			x.minCeiling = min(x.minCeiling, t.Ceiling.Capacity)
		}
		for class, q := range t.Classes {
			s := span(class)
			s.minCap = min(s.minCap, q.Capacity)
			x.classes[class] = s
		}
		if declared == nil {
			x.known++
			for class := range t.Classes {
				s := span(class)
				s.declared++
				x.classes[class] = s
			}
			continue
		}
		if names, ok := declared(tn); ok {
			x.known++
			for class := range names {
				s := span(class)
				s.declared++
				x.classes[class] = s
			}
		}
	}
	slices.Sort(x.names)
	return x
}

// everyKnown reports whether every tier whose class list is known declares
// class.
func (x *tierIndex) everyKnown(class string) bool { return x.classes[class].declared == x.known }

// anyDeclares reports whether some tier declares class, or some tier's
// class list is unknown.
func (x *tierIndex) anyDeclares(class string) bool {
	return x.known < len(x.names) || x.classes[class].declared > 0
}

// admits reports whether every tier can admit cost in class: within the
// class's capacity where a tier defines it, and within every ceiling.
func (x *tierIndex) admits(class string, cost int64) bool {
	s, ok := x.classes[class]
	return (!ok || cost <= s.minCap) && cost <= x.minCeiling
}

// allClasses is every class some tier declares, sorted.
func (x *tierIndex) allClasses() []string {
	out := make([]string, 0, len(x.classes))
	for c, s := range x.classes {
		if s.declared > 0 {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}
