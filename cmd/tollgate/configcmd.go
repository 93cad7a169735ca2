package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/tollgate-go/tollgate/core/config"
)

func init() {
	register(&command{
		name:    "config check",
		args:    "<file>",
		summary: "validate a tier configuration file and summarise it",
		details: `
Parses the file as a service would at start or reload. Every problem is
reported as file:line: field: message; the exit code is 1 when the file is
invalid. The schema is in docs/quotas.md.

With --running, also checks that a service started with that file would
apply this one on reload: its routes, gRPC methods and anonymous tier stay
in force until a restart, so every class they name must still be defined
(in every tier, with room for the route's cost), and so must the anonymous
tier and every tier of the running file (a tenant of a dropped tier would
fail every check). A file that drops one is refused, naming the route and
the class, or the tier.

Example:
  tollgate config check tiers.yaml
  tollgate config check --running tiers.yaml tiers-new.yaml`,
		min: 1, max: 1,
		flags: func(fs *flag.FlagSet, o *options) {
			fs.StringVar(&o.running, "running", "", "the file the service runs with: also check that a reload to <file> keeps its routes working")
		},
		run: configCheck,
	})
}

type problemJSON struct {
	File    string `json:"file"`
	Line    int    `json:"line"`
	Field   string `json:"field"`
	Message string `json:"message"`
}

func configCheck(_ context.Context, e *env, args []string) error {
	cfg, err := config.Load(args[0])
	// heading: what the error is said under (a file's problems), or ""
	// when it is one line already
	heading := "invalid configuration"
	if ce := (*config.Error)(nil); err != nil && !errors.As(err, &ce) {
		err, heading = oneLine{err}, ""
	}
	if err == nil && e.opts.running != "" {
		var base *config.Config
		if base, err = config.Load(e.opts.running); err != nil {
			err, heading = configError("--running", err), ""
		} else {
			err = base.CheckReload(cfg)
		}
	}
	if err != nil {
		if e.opts.json {
			var problems []problemJSON
			var ce *config.Error
			if errors.As(err, &ce) {
				for _, fe := range ce.Errs {
					problems = append(problems, problemJSON{fe.File, fe.Line, fe.Field, fe.Msg})
				}
			} else {
				problems = append(problems, problemJSON{File: args[0], Message: err.Error()})
			}
			if perr := e.printJSON(map[string]any{"valid": false, "problems": problems}); perr != nil {
				return perr
			}
		}
		if heading == "" {
			return err
		}
		return fmt.Errorf("%s:\n%w", heading, err)
	}
	if e.opts.json {
		tiers := map[string]map[string]any{}
		for _, name := range tierNames(cfg.Tiers) {
			t := cfg.Tiers.Tiers[name]
			classes := map[string]any{}
			for c, q := range t.Classes {
				classes[c] = map[string]any{"capacity": q.Capacity, "refill_per_second": q.RefillPerSecond}
			}
			entry := map[string]any{"classes": classes}
			if t.Ceiling != nil {
				entry["ceiling"] = map[string]any{"capacity": t.Ceiling.Capacity, "refill_per_second": t.Ceiling.RefillPerSecond}
			}
			tiers[name] = entry
		}
		return e.printJSON(map[string]any{
			"valid": true, "file": cfg.Source, "default_tier": cfg.Tiers.Default, "tiers": tiers,
			"routes": len(cfg.Routes), "grpc_methods": len(cfg.GRPCMethods), "key_prefix": cfg.KeyPrefix,
			"failure_policy": cfg.FailurePolicy.String(), "timeout": cfg.Timeout.String(), "cache_ttl": cfg.CacheTTL.String(),
		})
	}
	fmt.Fprintf(e.stdout, "%s: ok: %d tier(s), default %s; %d route(s), %d gRPC method(s); key prefix %s, fail %s, timeout %v, cache TTL %v\n",
		cfg.Source, len(cfg.Tiers.Tiers), cfg.Tiers.Default, len(cfg.Routes), len(cfg.GRPCMethods),
		cfg.KeyPrefix, cfg.FailurePolicy, cfg.Timeout, cfg.CacheTTL)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIER\tBUCKET\tCAPACITY\tRATE/S")
	for _, name := range tierNames(cfg.Tiers) {
		t := cfg.Tiers.Tiers[name]
		for _, c := range sortedKeys(t.Classes) {
			q := t.Classes[c]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", name, c, q.Capacity, strconv.FormatFloat(q.RefillPerSecond, 'g', -1, 64))
		}
		if t.Ceiling != nil {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", name, "tenant (ceiling)", t.Ceiling.Capacity, strconv.FormatFloat(t.Ceiling.RefillPerSecond, 'g', -1, 64))
		}
	}
	return tw.Flush()
}
