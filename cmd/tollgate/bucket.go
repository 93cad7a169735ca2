package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/config"
	"github.com/tollgate-go/tollgate/core/keys"
	"github.com/tollgate-go/tollgate/core/quota"
	"golang.org/x/term"
)

func init() {
	register(&command{
		name:    "bucket get",
		args:    "<tenant> [class]",
		summary: "show a tenant's buckets now: tokens, capacity, rate, TTL, concurrency slots held (read-only)",
		details: `
Peeks at the tenant's buckets with the real script at cost 0, which reads and
writes nothing: the command never charges a token. Capacity and rate come from
the tier configuration (--config, --tier) and, with --database-url, the
tenant's overrides, exactly as a service would resolve them. Without a class,
every class of the tier is shown, and the tenant-wide ceiling if the tier has
one. TTL is the key's remaining time in Redis; "absent" means the bucket has
no key, so it is full. A bucket with a concurrency limit is followed by the
slots held now and the time until each one's deadline (renewed while its
request runs; a crashed replica's slot frees itself at its deadline).

Example:
  tollgate bucket get --config tiers.yaml --tier pro t42
  tollgate bucket get --config tiers.yaml --database-url sqlite://quotas.db --json t42 export`,
		min: 1, max: 2,
		common: fRedis | fDatabase | fPrefix | fTimeout | fConfig,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.tier, "tier", "", "the tenant's tier (default: the config's default_tier)")
		},
		run: bucketGet,
	})
	register(&command{
		name:    "bucket reset",
		args:    "<tenant> [class...]",
		summary: "delete a tenant's buckets (all, or the named ones): they start full, their concurrency slots free",
		details: `
Deletes the bucket keys, so the next request finds a full bucket, and their
concurrency slots, so every slot is free (requests still in flight then
find their slot gone), and says how many keys it deleted (0: they were
already full and no slot was held). With class names (or
"tenant" for the ceiling) only those; with none, every bucket of the tenant
under the key prefix (--prefix, else the --config file's key_prefix, else
rl). Resetting every bucket asks for confirmation on a terminal; without a
terminal (a script, CI) it refuses unless --yes is given.

On a Redis Cluster give a Cluster URL, redis+cluster://host:port (any node;
more with ?addr=host2:port2): a plain redis:// URL reaches one node only.

Example:
  tollgate bucket reset t42 export tenant
  tollgate bucket reset --yes t42
  tollgate bucket reset --redis-url redis+cluster://10.0.0.5:6379 --yes t42`,
		min: 1, max: -1,
		common: fRedis | fPrefix | fTimeout | fConfig,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.BoolVar(&o.yes, "yes", false, "reset every bucket of the tenant without asking")
		},
		run: bucketReset,
	})
}

type bucketRow struct {
	Bucket          string  `json:"bucket"`
	Key             string  `json:"key"`
	Tokens          float64 `json:"tokens"`
	Remaining       int64   `json:"remaining"`
	Capacity        int64   `json:"capacity"`
	RefillPerSecond float64 `json:"refill_per_second"`
	FullInMillis    int64   `json:"full_in_ms"`
	Exists          bool    `json:"exists"`
	TTLMillis       int64   `json:"ttl_ms"`
	Source          string  `json:"source"`
	// Concurrency is the bucket's concurrency limit (0: none); Slots the
	// slots held now, earliest deadline first.
	Concurrency int64     `json:"concurrency,omitempty"`
	Slots       []slotRow `json:"slots,omitempty"`
}

// slotRow is one concurrency slot held: its id and how long until its
// deadline (it is renewed while its request runs).
type slotRow struct {
	ID               string `json:"id"`
	DeadlineInMillis int64  `json:"deadline_in_ms"`
}

// liveSlots reads the slots of a bucket whose deadline is ahead, on the
// store's clock, as the script counts them.
func liveSlots(ctx context.Context, client redis.UniversalClient, key string) ([]slotRow, error) {
	now, err := client.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("TIME: %w", err)
	}
	us := now.UnixMicro()
	zs, err := client.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(us, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("ZRANGE %s: %w", key, err)
	}
	rows := make([]slotRow, 0, len(zs))
	for _, z := range zs {
		id, _ := z.Member.(string)
		rows = append(rows, slotRow{ID: id, DeadlineInMillis: (int64(z.Score) - us) / 1000})
	}
	return rows, nil
}

func bucketGet(ctx context.Context, e *env, args []string) error {
	tenant := args[0]
	if err := checkTenant(tenant); err != nil {
		return err
	}
	cfg, err := e.loadConfig(true)
	if err != nil {
		return err
	}
	tierName := e.opts.tier
	if tierName == "" {
		tierName = cfg.Tiers.Default
	}
	tier, ok := cfg.Tiers.Tiers[tierName]
	if !ok {
		return usagef("tier %q is not in %s (tiers: %s)", tierName, cfg.Source, strings.Join(tierNames(cfg.Tiers), ", "))
	}
	var classes []string
	if len(args) == 2 {
		if _, ok := tier.Classes[args[1]]; !ok {
			return usagef("class %q is not in tier %q (classes: %s)", args[1], tierName, strings.Join(sortedKeys(tier.Classes), ", "))
		}
		classes = []string{args[1]}
	} else {
		classes = sortedKeys(tier.Classes)
	}
	prefix, err := e.prefix(cfg)
	if err != nil {
		return err
	}
	var ropts []quota.Option
	overridden := map[string]bool{}
	if e.opts.databaseURL != "" {
		ov, err := e.storedOverrides(ctx, tenant)
		if err != nil {
			return err
		}
		for b := range ov {
			overridden[b] = true
		}
		ropts = append(ropts, fixedOverrides(ov))
	}
	client, err := e.openRedis(ctx)
	if err != nil {
		return err
	}
	defer client.Close()
	// the service the file describes, as the services build it, with the
	// operator's prefix and timeout
	svc, err := config.OpenConfig(ctx, cfg, config.WithRedisClient(client), config.WithPingTimeout(e.opts.timeout),
		config.WithResolverOptions(ropts...), config.WithLimiterOptions(core.WithPrefix(prefix), core.WithTimeout(e.opts.timeout)))
	if err != nil {
		return err
	}
	defer svc.Close()
	lim := svc.Limiter
	t := quota.Tenant{ID: tenant, Tier: tierName}
	var rows []bucketRow
	seen := map[string]bool{}
	for _, class := range classes {
		d, err := lim.Peek(ctx, t, class)
		if err != nil {
			return err
		}
		for _, b := range d.Buckets {
			if seen[b.Name] {
				continue
			}
			seen[b.Name] = true
			key, err := lim.Keys().Bucket(tenant, b.Name)
			if err != nil {
				return err
			}
			ttl, err := client.PTTL(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("PTTL %s: %w", key, err)
			}
			row := bucketRow{
				Bucket: b.Name, Key: key, Tokens: b.Tokens, Remaining: int64(max(0, b.Tokens)),
				Capacity: b.Quota.Capacity, RefillPerSecond: b.Quota.RefillPerSecond,
				FullInMillis: fullIn(b).Milliseconds(), Exists: ttl != -2, TTLMillis: -1, Source: "tier",
			}
			if ttl > 0 {
				row.TTLMillis = ttl.Milliseconds()
			}
			if overridden[b.Name] {
				row.Source = "override"
			}
			if b.Quota.Concurrency > 0 {
				skey, err := lim.Keys().Slots(tenant, b.Name)
				if err != nil {
					return err
				}
				row.Concurrency = b.Quota.Concurrency
				if row.Slots, err = liveSlots(ctx, client, skey); err != nil {
					return err
				}
			}
			rows = append(rows, row)
		}
	}
	// the ceiling, charged with every class, goes last
	slices.SortStableFunc(rows, func(a, b bucketRow) int {
		return boolInt(a.Bucket == quota.CeilingBucket) - boolInt(b.Bucket == quota.CeilingBucket)
	})
	if e.opts.json {
		return e.printJSON(struct {
			Tenant  string      `json:"tenant"`
			Tier    string      `json:"tier"`
			Buckets []bucketRow `json:"buckets"`
		}{tenant, tierName, rows})
	}
	fmt.Fprintf(e.stdout, "tenant %s, tier %s\n", keys.EscapeID(tenant), tierName)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUCKET\tTOKENS\tCAPACITY\tRATE/S\tFULL IN\tTTL\tSOURCE\tKEY")
	for _, r := range rows {
		ttl := "absent (full)"
		if r.Exists {
			ttl = (time.Duration(r.TTLMillis) * time.Millisecond).String()
			if r.TTLMillis < 0 {
				ttl = "none"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Bucket, strconv.FormatFloat(r.Tokens, 'f', 3, 64), r.Capacity,
			strconv.FormatFloat(r.RefillPerSecond, 'g', -1, 64), time.Duration(r.FullInMillis)*time.Millisecond, ttl, r.Source, r.Key)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Concurrency == 0 {
			continue
		}
		fmt.Fprintf(e.stdout, "%s: %d of %d concurrency slots held", r.Bucket, len(r.Slots), r.Concurrency)
		for i, sl := range r.Slots {
			sep := ", "
			if i == 0 {
				sep = "; deadlines in "
			}
			fmt.Fprintf(e.stdout, "%s%v (%s)", sep, time.Duration(sl.DeadlineInMillis)*time.Millisecond, sl.ID)
		}
		fmt.Fprintln(e.stdout)
	}
	return nil
}

func fullIn(b core.BucketState) time.Duration {
	missing := float64(b.Quota.Capacity) - b.Tokens
	if missing <= 0 {
		return 0
	}
	return time.Duration(missing / b.Quota.RefillPerSecond * float64(time.Second)).Round(time.Millisecond)
}

func bucketReset(ctx context.Context, e *env, args []string) error {
	tenant, buckets := args[0], args[1:]
	if err := checkTenant(tenant); err != nil {
		return err
	}
	for _, b := range buckets {
		if err := checkBucket(b); err != nil {
			return err
		}
	}
	cfg, err := e.loadConfig(false)
	if err != nil {
		return err
	}
	prefix, err := e.prefix(cfg)
	if err != nil {
		return err
	}
	noQuota := quota.ResolverFunc(func(context.Context, quota.Tenant, string) ([]quota.Bucket, error) {
		return nil, errors.New("reset resolves no quota")
	})
	lim, client, err := e.openLimiter(ctx, noQuota, core.WithPrefix(prefix))
	if err != nil {
		return err
	}
	defer client.Close()
	if len(buckets) == 0 && !e.opts.yes {
		if err := e.confirm(fmt.Sprintf("Delete every bucket of tenant %s under prefix %s?", keys.EscapeID(tenant), prefix)); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.timeout)
	defer cancel()
	n, err := lim.Reset(rctx, quota.Tenant{ID: tenant}, buckets...)
	if err != nil {
		return err
	}
	if e.opts.json {
		return e.printJSON(struct {
			Tenant  string   `json:"tenant"`
			All     bool     `json:"all"`
			Buckets []string `json:"buckets"`
			Prefix  string   `json:"prefix"`
			Deleted int64    `json:"deleted"`
		}{tenant, len(buckets) == 0, buckets, prefix, n})
	}
	if cfg != nil {
		for _, b := range buckets {
			if !definedBucket(cfg, b) {
				fmt.Fprintf(e.stderr, "tollgate bucket reset: %q is not a class of any tier in %s\n", b, e.opts.configPath)
			}
		}
	}
	what := "every bucket"
	if len(buckets) > 0 {
		what = strings.Join(buckets, ", ")
	}
	if n == 0 {
		fmt.Fprintf(e.stdout, "reset tenant %s (prefix %s): %s: nothing to reset: no key (a full bucket has none; check the tenant, the names and the prefix)\n", keys.EscapeID(tenant), prefix, what)
		return nil
	}
	fmt.Fprintf(e.stdout, "reset tenant %s (prefix %s): %s: %d key(s) deleted\n", keys.EscapeID(tenant), prefix, what, n)
	return nil
}

// definedBucket reports whether some tier of cfg has bucket b: a class, or
// the tenant-wide ceiling of a tier that sets one.
func definedBucket(cfg *config.Config, b string) bool {
	for _, t := range cfg.Tiers.Tiers {
		if _, ok := t.Classes[b]; ok || (b == quota.CeilingBucket && t.Ceiling != nil) {
			return true
		}
	}
	return false
}

// confirm asks question on the terminal and returns nil on "y" or "yes".
// Without a terminal on stdin it refuses: a destructive command in a
// script must say --yes.
func (e *env) confirm(question string) error {
	f, ok := e.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return usagef("%s needs confirmation, and stdin is not a terminal: pass --yes to reset every bucket of the tenant", strings.ToLower(question[:1])+strings.TrimSuffix(question[1:], "?"))
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(f).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errors.New("not confirmed: nothing deleted")
}

func tierNames(ts quota.Tiers) []string { return sortedKeys(ts.Tiers) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
