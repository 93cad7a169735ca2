package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/quota"
)

// maxSimulated bounds --count: a simulation is for reading, not load.
const maxSimulated = 10000

func init() {
	register(&command{
		name:    "simulate",
		args:    "",
		summary: "show what a sequence of requests would get (real script, throwaway keys)",
		details: `
Runs the request sequence through the REAL token-bucket script on the Redis
at --redis-url, in client-clock mode with a simulated clock (so --count 100
--interval 1m takes milliseconds, not 100 minutes), on a throwaway key prefix
that is deleted afterwards. Nothing a service uses is read or charged. Each
bucket starts full.

The quota is the class of a tier in --config (with the tier's ceiling), and,
with --database-url and --tenant, that tenant's overrides; or an ad-hoc
--capacity and --rate.

Example:
  tollgate simulate --config tiers.yaml --tier free --class export --cost 5 --count 10 --interval 1s
  tollgate simulate --capacity 10 --rate 0.5 --count 20 --interval 500ms --json`,
		min: 0, max: 0,
		common: fRedis | fDatabase | fTimeout | fConfig,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.tier, "tier", "", "tier in --config (default: its default_tier)")
			fs.StringVar(&o.class, "class", quota.DefaultClass, "class of the requests")
			fs.StringVar(&o.tenant, "tenant", "", "tenant whose overrides apply (needs --database-url)")
			fs.Int64Var(&o.capacity, "capacity", 0, "ad-hoc quota: burst in tokens (with --rate, instead of --config)")
			fs.Float64Var(&o.rate, "rate", 0, "ad-hoc quota: tokens per second")
			fs.Int64Var(&o.cost, "cost", 1, "tokens each request takes")
			fs.IntVar(&o.count, "count", 10, "number of requests (at most 10000)")
			fs.DurationVar(&o.interval, "interval", time.Second, "simulated time between requests")
		},
		run: simulate,
	})
}

type simRow struct {
	N            int     `json:"n"`
	AtMillis     int64   `json:"at_ms"`
	Allowed      bool    `json:"allowed"`
	Reason       string  `json:"reason"`
	Policy       string  `json:"policy"`
	Remaining    int64   `json:"remaining"`
	Tokens       float64 `json:"tokens"`
	RetryAfterMs int64   `json:"retry_after_ms"`
}

func simulate(ctx context.Context, e *env, _ []string) error {
	o := e.opts
	switch {
	case o.count < 1 || o.count > maxSimulated:
		return usagef("bad --count %d: must be 1 to %d", o.count, maxSimulated)
	case o.interval < 0:
		return usagef("bad --interval %v: must be >= 0", o.interval)
	case o.cost < 0 || o.cost > quota.MaxCost:
		return usagef("bad --cost %d: must be 0 to %d", o.cost, int64(quota.MaxCost))
	case o.interval > 0 && float64(o.count)*float64(o.interval) > float64(100*365*24*time.Hour):
		return usagef("--count × --interval spans more than 100 years")
	}
	if err := checkBucket(o.class); err != nil {
		return err
	}
	adhoc := o.capacity != 0 || o.rate != 0
	var tiers quota.Tiers
	tierName := o.tier
	switch {
	case adhoc && o.configPath != "":
		return usagef("give --config or --capacity/--rate, not both")
	case adhoc:
		q := quota.Quota{Capacity: o.capacity, RefillPerSecond: o.rate}
		if err := q.Validate(); err != nil {
			return usagef("bad ad-hoc quota: %v", err)
		}
		tierName = "adhoc"
		tiers = quota.Tiers{Default: tierName, Tiers: map[string]quota.Tier{tierName: {Classes: map[string]quota.Quota{o.class: q}}}}
	default:
		cfg, err := e.loadConfig(false)
		if err != nil {
			return err
		}
		if cfg == nil {
			return usagef("no quota: give --config FILE (with --tier, --class) or --capacity and --rate")
		}
		tiers = cfg.Tiers
		if tierName == "" {
			tierName = tiers.Default
		}
		t, ok := tiers.Tiers[tierName]
		if !ok {
			return usagef("tier %q is not in %s (tiers: %v)", tierName, cfg.Source, tierNames(tiers))
		}
		if _, ok := t.Classes[o.class]; !ok {
			return usagef("class %q is not in tier %q (classes: %v)", o.class, tierName, sortedKeys(t.Classes))
		}
	}
	tenant := o.tenant
	var ropts []quota.Option
	if tenant != "" {
		if err := checkTenant(tenant); err != nil {
			return err
		}
		if o.databaseURL == "" {
			return usagef("--tenant needs --database-url (its overrides)")
		}
		ov, err := e.storedOverrides(ctx, tenant)
		if err != nil {
			return err
		}
		ropts = append(ropts, fixedOverrides(ov))
	} else {
		tenant = "simulated"
	}
	resolver, err := quota.NewResolver(tiers, ropts...)
	if err != nil {
		return err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "tollgate-sim-" + hex.EncodeToString(b[:])
	start := time.Now()
	var offset atomic.Int64
	clock := func() time.Time { return start.Add(time.Duration(offset.Load())) }
	lim, client, err := e.openLimiter(ctx, resolver, core.WithPrefix(prefix), core.WithClock(clock),
		core.WithTimeout(o.timeout), core.WithFailurePolicy(core.FailClosed))
	if err != nil {
		return err
	}
	defer client.Close()
	t := quota.Tenant{ID: tenant, Tier: tierName}
	defer func() {
		// The throwaway keys go even if the run was interrupted.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.timeout)
		defer cancel()
		_, _ = lim.Reset(cctx, t)
	}()
	rows := make([]simRow, 0, o.count)
	admitted := 0
	var qt quota.Quota
	for i := range o.count {
		offset.Store(int64(i) * int64(o.interval))
		d, err := lim.Check(ctx, core.Request{Tenant: t, Class: o.class, Cost: o.cost})
		if err != nil {
			return err
		}
		if i == 0 {
			qt = d.Quota
		}
		if d.Allowed {
			admitted++
		}
		rows = append(rows, simRow{N: i + 1, AtMillis: (time.Duration(i) * o.interval).Milliseconds(), Allowed: d.Allowed,
			Reason: d.Reason.String(), Policy: d.Bucket, Remaining: d.Remaining, Tokens: d.Tokens,
			RetryAfterMs: int64(math.Ceil(float64(d.RetryAfter) / float64(time.Millisecond)))})
	}
	if o.json {
		return e.printJSON(map[string]any{
			"engine": "lua-script-client-clock", "tier": tierName, "class": o.class, "tenant": tenant,
			"cost": o.cost, "count": o.count, "interval_ms": o.interval.Milliseconds(),
			"admitted": admitted, "denied": o.count - admitted, "requests": rows,
		})
	}
	fmt.Fprintf(e.stdout, "tier %s, class %s (%s), cost %d, %d requests every %v; real script, simulated clock\n",
		tierName, o.class, qt, o.cost, o.count, o.interval)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tAT\tRESULT\tBUCKET\tREMAINING\tTOKENS\tRETRY AFTER")
	for _, r := range rows {
		res := "allowed"
		if !r.Allowed {
			res = "denied (" + r.Reason + ")"
		}
		retry := "-"
		if r.RetryAfterMs > 0 {
			retry = (time.Duration(r.RetryAfterMs) * time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%d\t%v\t%s\t%s\t%d\t%s\t%s\n", r.N, time.Duration(r.AtMillis)*time.Millisecond, res, r.Policy, r.Remaining,
			strconv.FormatFloat(r.Tokens, 'f', 3, 64), retry)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "admitted %d of %d\n", admitted, o.count)
	return nil
}
