// Package rlconfig is envoyproxy/ratelimit's YAML configuration as Go
// types, and its fixed windows as token buckets: one definition read by
// rls's rules, written by tollgate-rls's xDS client (a pushed resource
// becomes a document rls reads) and read by tollgate-rls convert.
//
// The tags serve reading and writing alike: a field the reference leaves
// out when empty is written only when set.
package rlconfig

import (
	"strings"

	"github.com/tollgate-go/tollgate/core/quota"
)

// Root is one configuration document: one domain.
type Root struct {
	Domain      string       `yaml:"domain"`
	Descriptors []Descriptor `yaml:"descriptors,omitempty"`
}

// Descriptor is one level of a domain's descriptor tree.
type Descriptor struct {
	Key            string       `yaml:"key"`
	Value          string       `yaml:"value,omitempty"`
	RateLimit      *RateLimit   `yaml:"rate_limit,omitempty"`
	Descriptors    []Descriptor `yaml:"descriptors,omitempty"`
	ShadowMode     bool         `yaml:"shadow_mode,omitempty"`
	QuotaMode      bool         `yaml:"quota_mode,omitempty"`
	DetailedMetric bool         `yaml:"detailed_metric,omitempty"`
	ValueToMetric  bool         `yaml:"value_to_metric,omitempty"`
	ShareThreshold bool         `yaml:"share_threshold,omitempty"`
	// Metadata is the descriptor's metadata, the user's own keys.
	Metadata map[string]any `yaml:"metadata,omitempty"`
	// Tollgate is tollgate-rls's own block: the descriptor's bucket is the
	// services' (tenant, class).
	Tollgate *Tollgate `yaml:"tollgate,omitempty"`
	// Line is the descriptor's line in its file, when the reader sets it.
	Line int `yaml:"-"`
}

// RateLimit is a descriptor's rate_limit.
type RateLimit struct {
	RequestsPerUnit uint32    `yaml:"requests_per_unit"`
	Unit            string    `yaml:"unit"`
	UnitMultiplier  uint32    `yaml:"unit_multiplier,omitempty"` // 0 or 1: one unit
	Unlimited       bool      `yaml:"unlimited,omitempty"`
	Name            string    `yaml:"name,omitempty"`
	Replaces        []Replace `yaml:"replaces,omitempty"`
}

// Replace names a rate limit that a descriptor's replaces.
type Replace struct {
	Name string `yaml:"name"`
}

// Tollgate is the tollgate block of a descriptor.
type Tollgate struct {
	Tenant string `yaml:"tenant,omitempty"`
	Tier   string `yaml:"tier,omitempty"`
	Class  string `yaml:"class,omitempty"`
}

// unitSeconds are the reference's units by lower-case name; a month is 30
// days and a year 365 (a bucket refills continuously: there is no
// calendar).
var unitSeconds = map[string]float64{
	"second": 1, "minute": 60, "hour": 3600, "day": 86400,
	"week": 7 * 86400, "month": 30 * 86400, "year": 365 * 86400,
}

// Window is the length in seconds of multiplier units named unit (in any
// case; a multiplier of 0 is one unit), and false for a unit the reference
// does not know.
func Window(unit string, multiplier uint32) (float64, bool) {
	secs, ok := unitSeconds[strings.ToLower(unit)]
	return secs * float64(max(multiplier, 1)), ok
}

// Quota is the token bucket of a fixed window of n requests in secs
// seconds: the window's requests are the burst, refilled evenly over the
// window. It fails as quota.Quota.Validate does.
func Quota(n uint32, secs float64) (quota.Quota, error) {
	q := quota.Quota{Capacity: int64(n), RefillPerSecond: float64(n) / secs}
	return q, q.Validate()
}
