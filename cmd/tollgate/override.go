package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"github.com/tollgate-go/tollgate/sqlquota"
)

func init() {
	register(&command{
		name:    "override migrate",
		args:    "",
		summary: "create the overrides table if it does not exist (idempotent)",
		details: `
Creates the table (and, for SQLite, the file). Safe to run again. The SQL is
in docs/quotas.md for teams that run migrations with their own tool.

Example:
  tollgate override migrate --database-url sqlite://quotas.db`,
		min: 0, max: 0,
		common: fDatabase | fTimeout,
		run:    overrideMigrate,
	})
	register(&command{
		name:    "override set",
		args:    "<tenant> <bucket>",
		summary: "set (insert or replace) a tenant's override of one bucket",
		details: `
The bucket is a class name, or "tenant" for the tenant-wide ceiling. Services
pick the change up at their next cache refresh (cache_ttl, 45 s by default),
with no deploy; the bucket keeps its tokens, clamped to the new capacity.
--concurrency N also limits the tenant to N requests of the bucket in flight
at once (a class only, not the tenant-wide ceiling); without it the override
has no concurrency limit, even if the tier's class has one.

--config names the tier file the services load: a bucket that no tier in it
defines (a typo such as "exprot") would never apply, and is refused with the
list of known buckets. --force stores it anyway (a class about to be added),
with or without --config.

Example:
  tollgate override set --config tiers.yaml t42 export --capacity 500 --rate 5 --for 720h --reason "JIRA-123: migration"`,
		min: 2, max: 2,
		common: fDatabase | fTimeout | fConfig,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.force, "force", false, "store the override even if no tier in --config defines the bucket")
			fs.Int64Var(&o.capacity, "capacity", 0, "burst, in tokens (required, > 0)")
			fs.Float64Var(&o.rate, "rate", 0, "refill rate, tokens per second (required, > 0; may be fractional)")
			fs.Int64Var(&o.concurrency, "concurrency", 0, "most requests in flight at once per tenant (1 to 100000); default none")
			fs.StringVar(&o.expires, "expires", "", "expiry time, RFC 3339 (e.g. 2026-12-31T00:00:00Z); default never")
			fs.DurationVar(&o.expiresIn, "for", 0, "expire after this long (e.g. 72h), instead of --expires")
			fs.StringVar(&o.by, "by", "", "who makes the change (default $USER, else the account the command runs as)")
			fs.StringVar(&o.reason, "reason", "", "why (a ticket, a contract)")
		},
		run: overrideSet,
	})
	register(&command{
		name:    "override get",
		args:    "<tenant> <bucket>",
		summary: "show one override (expired ones too)",
		min:     2, max: 2,
		common: fDatabase | fTimeout,
		run:    overrideGet,
	})
	register(&command{
		name:    "override list",
		args:    "[tenant]",
		summary: "list overrides in force, of every tenant or of one",
		details: `
A row that cannot be read (a value of the wrong type written by hand, such
as a capacity of 1.5 in SQLite) is reported on stderr and the others are
listed; the exit code stays 0.

Example:
  tollgate override list
  tollgate override list --all --json t42`,
		min: 0, max: 1,
		common: fDatabase | fTimeout,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.all, "all", false, "include expired overrides")
			fs.IntVar(&o.limit, "limit", 1000, "at most this many rows")
		},
		run: overrideList,
	})
	register(&command{
		name:    "override delete",
		args:    "<tenant> <bucket>",
		summary: "delete an override: the tier default applies again at the next refresh",
		min:     2, max: 2,
		common: fDatabase | fTimeout,
		run:    overrideDelete,
	})
}

type overrideJSON struct {
	TenantID        string  `json:"tenant_id"`
	Bucket          string  `json:"bucket"`
	Capacity        int64   `json:"capacity"`
	RefillPerSecond float64 `json:"refill_per_second"`
	Concurrency     int64   `json:"concurrency"`
	ExpiresAt       *string `json:"expires_at"`
	Expired         bool    `json:"expired"`
	UpdatedAt       string  `json:"updated_at"`
	UpdatedBy       string  `json:"updated_by"`
	Reason          string  `json:"reason"`
}

func toJSON(o sqlquota.Override, now time.Time) overrideJSON {
	j := overrideJSON{TenantID: o.TenantID, Bucket: o.Bucket, Capacity: o.Quota.Capacity, RefillPerSecond: o.Quota.RefillPerSecond,
		Concurrency: o.Quota.Concurrency, Expired: o.Expired(now), UpdatedAt: o.UpdatedAt.Format(time.RFC3339Nano), UpdatedBy: o.UpdatedBy, Reason: o.Reason}
	if !o.ExpiresAt.IsZero() {
		s := o.ExpiresAt.Format(time.RFC3339Nano)
		j.ExpiresAt = &s
	}
	return j
}

// withStore opens the override store and runs f under the command's
// timeout, closing the store afterwards.
func (e *env) withStore(ctx context.Context, mustExist bool, f func(ctx context.Context, s *sqlquota.Store) error) error {
	s, closeDB, err := e.openStore(mustExist)
	if err != nil {
		return err
	}
	defer closeDB()
	ctx, cancel := context.WithTimeout(ctx, e.opts.timeout)
	defer cancel()
	return f(ctx, s)
}

// notFoundOr names a missing override, or explains another database error.
func notFoundOr(err error, s *sqlquota.Store, tenant, bucket string) error {
	if errors.Is(err, sqlquota.ErrNotFound) {
		return fmt.Errorf("no override for tenant %s bucket %s", keys.EscapeID(tenant), keys.EscapeID(bucket))
	}
	return dbHint(err, s)
}

func overrideMigrate(ctx context.Context, e *env, _ []string) error {
	return e.withStore(ctx, false, func(ctx context.Context, s *sqlquota.Store) error {
		if err := s.Migrate(ctx); err != nil {
			return dbHint(err, s)
		}
		if e.opts.json {
			return e.printJSON(map[string]any{"table": s.Table(), "dialect": s.Dialect().String(), "schema_version": sqlquota.SchemaVersion})
		}
		fmt.Fprintf(e.stdout, "table %s ready (%s, schema version %d)\n", s.Table(), s.Dialect(), sqlquota.SchemaVersion)
		return nil
	})
}

// currentUser is who makes a change when --by does not say: $USER, else
// the account the process runs as (cron and containers often have no
// $USER), else "unknown".
func currentUser(getenv func(string) string) string {
	if u := strings.TrimSpace(getenv("USER")); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil && strings.TrimSpace(u.Username) != "" {
		return u.Username
	}
	return "unknown"
}

func overrideSet(ctx context.Context, e *env, args []string) error {
	o := sqlquota.Override{TenantID: args[0], Bucket: args[1], Reason: e.opts.reason, UpdatedBy: e.opts.by,
		Quota: quota.Quota{Capacity: e.opts.capacity, RefillPerSecond: e.opts.rate, Concurrency: e.opts.concurrency}}
	if o.UpdatedBy == "" && !e.opts.set["by"] {
		o.UpdatedBy = currentUser(e.getenv)
	}
	switch capSet, rateSet := e.opts.set["capacity"], e.opts.set["rate"]; {
	case !capSet && !rateSet:
		return usagef("--capacity and --rate are required")
	case !capSet:
		return usagef("--capacity is required")
	case !rateSet:
		return usagef("--rate is required")
	}
	if e.opts.set["concurrency"] && e.opts.concurrency == 0 {
		return usagef("bad --concurrency 0: give 1 to %d, or leave it out for no concurrency limit", quota.MaxConcurrency)
	}
	now := time.Now()
	switch {
	case e.opts.expires != "" && e.opts.expiresIn != 0:
		return usagef("give --expires or --for, not both")
	case e.opts.expires != "":
		t, err := time.Parse(time.RFC3339, e.opts.expires)
		if err != nil {
			return usagef("bad --expires %q: want RFC 3339, e.g. 2026-12-31T00:00:00Z", e.opts.expires)
		}
		o.ExpiresAt = t
	case e.opts.expiresIn < 0:
		return usagef("bad --for %v: must be > 0", e.opts.expiresIn)
	case e.opts.expiresIn > 0:
		o.ExpiresAt = now.Add(e.opts.expiresIn)
	}
	if err := o.Validate(now); err != nil {
		return usagef("%v", err)
	}
	if err := e.checkOverrideBucket(o.Bucket); err != nil {
		return err
	}
	return e.withStore(ctx, true, func(ctx context.Context, s *sqlquota.Store) error {
		stored, err := s.Set(ctx, o)
		if err != nil {
			if errors.Is(err, core.ErrInvalidRequest) || errors.Is(err, quota.ErrInvalid) {
				return usagef("%v", err)
			}
			return dbHint(err, s)
		}
		if e.opts.json {
			return e.printJSON(toJSON(stored, now))
		}
		fmt.Fprintf(e.stdout, "set override %s/%s: %s\n", keys.EscapeID(stored.TenantID), stored.Bucket, describe(stored))
		return nil
	})
}

// checkOverrideBucket refuses, unless --force, an override of a bucket that
// no tier in --config defines: the services would never apply it.
func (e *env) checkOverrideBucket(bucket string) error {
	if e.opts.configPath == "" {
		if e.opts.force {
			return nil
		}
		return usagef("give --config FILE (the tier file the services load) to check that a tier defines bucket %q, or --force to store it unchecked", bucket)
	}
	cfg, err := e.loadConfig(true)
	if err != nil {
		return err
	}
	known := tierBuckets(cfg.Tiers)
	if slices.Contains(known, bucket) {
		return nil
	}
	if e.opts.force {
		fmt.Fprintf(e.stderr, "warning: no tier defines bucket %q in %s: the override applies only once one does\n", bucket, cfg.Source)
		return nil
	}
	return usagef("bucket %q is not defined by any tier in %s (known buckets: %s): its override would never apply; check the spelling, or give --force to store it anyway",
		bucket, cfg.Source, strings.Join(known, ", "))
}

// tierBuckets returns, sorted, the buckets some tier of ts defines: its
// classes, and the tenant-wide ceiling if a tier has one.
func tierBuckets(ts quota.Tiers) []string {
	var out []string
	for _, tier := range ts.Tiers {
		out = append(out, sortedKeys(tier.Classes)...)
		if tier.Ceiling != nil {
			out = append(out, quota.CeilingBucket)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func describe(o sqlquota.Override) string {
	s := fmt.Sprintf("capacity %d, %s tokens/s", o.Quota.Capacity, strconv.FormatFloat(o.Quota.RefillPerSecond, 'g', -1, 64))
	if o.Quota.Concurrency > 0 {
		s += fmt.Sprintf(", %d in flight", o.Quota.Concurrency)
	}
	if !o.ExpiresAt.IsZero() {
		s += ", expires " + o.ExpiresAt.Format(time.RFC3339)
	}
	return s
}

func overrideGet(ctx context.Context, e *env, args []string) error {
	if err := checkTenant(args[0]); err != nil {
		return err
	}
	return e.withStore(ctx, true, func(ctx context.Context, s *sqlquota.Store) error {
		o, err := s.Get(ctx, args[0], args[1])
		if err != nil {
			return notFoundOr(err, s, args[0], args[1])
		}
		now := time.Now()
		if e.opts.json {
			return e.printJSON(toJSON(o, now))
		}
		return printOverrides(e, []sqlquota.Override{o}, now)
	})
}

func overrideList(ctx context.Context, e *env, args []string) error {
	opt := sqlquota.ListOptions{IncludeExpired: e.opts.all, Limit: e.opts.limit}
	if len(args) == 1 {
		if err := checkTenant(args[0]); err != nil {
			return err
		}
		opt.TenantID = args[0]
	}
	if e.opts.limit < 1 {
		return usagef("bad --limit %d: must be >= 1", e.opts.limit)
	}
	return e.withStore(ctx, true, func(ctx context.Context, s *sqlquota.Store) error {
		list, err := s.List(ctx, opt)
		bad, onlyBadRows := rowErrors(err)
		if err != nil && !onlyBadRows {
			return dbHint(err, s)
		}
		// an unreadable row (a wrong value written by hand) is reported
		// beside the listing of the others, not instead of it
		for _, re := range bad {
			fmt.Fprintf(e.stderr, "tollgate override list: skipped a row: %v (fix it in the database, or 'tollgate override delete' it)\n", re)
		}
		now := time.Now()
		if e.opts.json {
			out := make([]overrideJSON, len(list))
			for i, o := range list {
				out[i] = toJSON(o, now)
			}
			return e.printJSON(out)
		}
		if len(list) == 0 {
			if len(bad) == 0 {
				fmt.Fprintln(e.stdout, "no overrides")
			}
			return nil
		}
		return printOverrides(e, list, now)
	})
}

// rowErrors returns the unreadable rows List reported in err, and whether
// err (when not nil) is nothing else.
func rowErrors(err error) ([]*sqlquota.RowError, bool) {
	if err == nil {
		return nil, true
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]*sqlquota.RowError, 0, len(errs))
	for _, e := range errs {
		re, ok := e.(*sqlquota.RowError)
		if !ok {
			return nil, false
		}
		out = append(out, re)
	}
	return out, true
}

func printOverrides(e *env, list []sqlquota.Override, now time.Time) error {
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tBUCKET\tCAPACITY\tRATE/S\tIN FLIGHT\tEXPIRES\tUPDATED\tBY\tREASON")
	for _, o := range list {
		exp := "never"
		if !o.ExpiresAt.IsZero() {
			exp = o.ExpiresAt.Format(time.RFC3339)
			if o.Expired(now) {
				exp += " (expired)"
			}
		}
		inFlight := "-"
		if o.Quota.Concurrency > 0 {
			inFlight = strconv.FormatInt(o.Quota.Concurrency, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", keys.EscapeID(o.TenantID), o.Bucket, o.Quota.Capacity,
			strconv.FormatFloat(o.Quota.RefillPerSecond, 'g', -1, 64), inFlight, exp, o.UpdatedAt.Format(time.RFC3339),
			o.UpdatedBy, strconv.Quote(o.Reason))
	}
	return tw.Flush()
}

func overrideDelete(ctx context.Context, e *env, args []string) error {
	if err := checkTenant(args[0]); err != nil {
		return err
	}
	return e.withStore(ctx, true, func(ctx context.Context, s *sqlquota.Store) error {
		if err := s.Delete(ctx, args[0], args[1]); err != nil {
			return notFoundOr(err, s, args[0], args[1])
		}
		if e.opts.json {
			return e.printJSON(map[string]any{"deleted": true, "tenant_id": args[0], "bucket": args[1]})
		}
		fmt.Fprintf(e.stdout, "deleted override %s/%s: the tier default applies at the next cache refresh\n", keys.EscapeID(args[0]), args[1])
		return nil
	})
}
