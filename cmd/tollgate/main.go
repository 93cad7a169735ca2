// Command tollgate is the operator's tool for tollgate rate limits: it shows
// and resets a tenant's buckets in Redis, manages per-tenant quota overrides
// in the database, checks tier configuration files, and simulates what a
// sequence of requests would get.
//
// Run "tollgate --help" for the commands, and "tollgate <command> --help"
// for each one. Exit codes: 0 success, 1 runtime error (Redis or the
// database failed, an override was not found, a configuration file is
// invalid), 2 usage error (unknown command, bad flag, missing or bad
// argument).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/tollgate-go/tollgate/core/config"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// env is what a command runs with.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	opts           *options
}

// options holds every flag; each command registers the ones it reads.
type options struct {
	redisURL, databaseURL, prefix, table string
	json                                 bool
	timeout                              time.Duration

	configPath, tier, class, tenant string
	running                         string
	capacity                        int64
	rate                            float64
	concurrency                     int64
	cost                            int64
	count                           int
	interval                        time.Duration
	expires                         string
	expiresIn                       time.Duration
	by, reason                      string
	all, yes, force                 bool
	limit                           int

	// set names the flags given on the command line, to tell a flag left
	// out from one given its zero value.
	set map[string]bool
}

// flag groups a command can register.
const (
	fRedis = 1 << iota
	fDatabase
	fPrefix
	fTimeout
	fConfig
)

type command struct {
	name    string // "bucket get"
	args    string // "<tenant> [class]"
	summary string
	details string
	min     int
	max     int // -1: any
	common  int // flag groups
	flags   func(fs *flag.FlagSet, o *options)
	run     func(ctx context.Context, e *env, args []string) error
}

var commands []*command

func register(c *command) { commands = append(commands, c) }

func lookup(words []string) (*command, int) {
	for n := min(2, len(words)); n >= 1; n-- {
		name := strings.Join(words[:n], " ")
		for _, c := range commands {
			if c.name == name {
				return c, n
			}
		}
	}
	return nil, 0
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	o := &options{}
	global := flag.NewFlagSet("tollgate", flag.ContinueOnError)
	global.SetOutput(io.Discard)
	// every common flag may come before the command too; a command uses
	// those it takes (their value is its flag's default) and ignores the
	// others, so one set of flags can go before every command
	registerCommon(global, o, fRedis|fDatabase|fPrefix|fTimeout|fConfig, getenv)
	global.BoolVar(&o.json, "json", false, "")
	showVersion := global.Bool("version", false, "")
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			mainUsage(stdout)
			return exitOK
		}
		fmt.Fprintf(stderr, "tollgate: %v\nRun 'tollgate --help' for usage.\n", err)
		return exitUsage
	}
	rest := global.Args()
	if *showVersion {
		fmt.Fprintln(stdout, config.BuildVersion("tollgate"))
		return exitOK
	}
	if len(rest) == 0 {
		mainUsage(stderr)
		return exitUsage
	}
	if rest[0] == "help" {
		if c, n := lookup(rest[1:]); c != nil && n == len(rest)-1 {
			commandUsage(stdout, c)
		} else {
			mainUsage(stdout)
		}
		return exitOK
	}
	c, n := lookup(rest)
	if c == nil {
		if group := groupOf(rest[0]); group != "" {
			sub := ""
			if len(rest) > 1 {
				sub = rest[1]
			}
			if sub == "" || sub == "-h" || sub == "--help" || sub == "-help" {
				groupUsage(stdout, rest[0])
				if sub == "" {
					return exitUsage
				}
				return exitOK
			}
			fmt.Fprintf(stderr, "tollgate: unknown command %q\n", rest[0]+" "+sub)
			groupUsage(stderr, rest[0])
			return exitUsage
		}
		fmt.Fprintf(stderr, "tollgate: unknown command %q\nRun 'tollgate --help' for the commands.\n", rest[0])
		return exitUsage
	}
	fs := flag.NewFlagSet("tollgate "+c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerCommon(fs, o, c.common, getenv)
	fs.BoolVar(&o.json, "json", o.json, "print JSON instead of text")
	if c.flags != nil {
		c.flags(fs, o)
	}
	pos, err := parseInterspersed(fs, rest[n:])
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(stdout, c)
		return exitOK
	}
	if err == nil && (len(pos) < c.min || (c.max >= 0 && len(pos) > c.max)) {
		err = usagef("want arguments %s, got %d argument(s)", c.args, len(pos))
	}
	if err == nil {
		err = c.run(ctx, &env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv, opts: o}, pos)
	}
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue) || isFlagError(err):
		fmt.Fprintf(stderr, "tollgate %s: %v\nRun 'tollgate %s --help' for usage.\n", c.name, err, c.name)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "tollgate %s: %v\n", c.name, err)
		return exitError
	}
}

// flagError marks errors from flag parsing.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }

func isFlagError(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

// parseInterspersed parses flags anywhere among the arguments (the flag
// package stops at the first positional one); "--" ends the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, flagError{err}
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func registerCommon(fs *flag.FlagSet, o *options, groups int, getenv func(string) string) {
	if groups&fRedis != 0 {
		def := o.redisURL
		if def == "" {
			def = getenv("REDIS_URL")
		}
		fs.StringVar(&o.redisURL, "redis-url", def, "Redis URL: redis://[user:pass@]host:port/db, a Cluster's\nredis+cluster://[user:pass@]host:port,host2:port2, or a Sentinel's\nredis+sentinel://[user:pass@]host:port,host2:port2/master[/db] (default $REDIS_URL)")
	}
	if groups&fDatabase != 0 {
		def := o.databaseURL
		if def == "" {
			def = getenv("DATABASE_URL")
		}
		fs.StringVar(&o.databaseURL, "database-url", def, "override database: sqlite://path or postgres://... (default $DATABASE_URL)")
		table := o.table
		if table == "" {
			table = "tollgate_overrides"
		}
		fs.StringVar(&o.table, "table", table, "override table name (PostgreSQL: may be schema.table)")
	}
	if groups&fPrefix != 0 {
		fs.StringVar(&o.prefix, "prefix", o.prefix, "Redis key prefix (default: the config file's key_prefix, else rl)")
	}
	if groups&fTimeout != 0 {
		timeout := o.timeout
		if timeout == 0 {
			timeout = 5 * time.Second
		}
		fs.DurationVar(&o.timeout, "timeout", timeout, "bound on each Redis or database call")
	}
	if groups&fConfig != 0 {
		fs.StringVar(&o.configPath, "config", o.configPath, "tier configuration file (YAML; see docs/quotas.md)")
	}
}

func groupOf(word string) string {
	for _, c := range commands {
		if g, _, ok := strings.Cut(c.name, " "); ok && g == word {
			return g
		}
	}
	return ""
}

func mainUsage(w io.Writer) {
	fmt.Fprint(w, `tollgate: operate tollgate rate limits.

Usage:
  tollgate <command> [flags] [arguments]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, `
Flags accepted before the command too (a command ignores those it does
not take; one given after the command wins):
  --redis-url URL      Redis URL (default $REDIS_URL)
  --database-url URL   sqlite://path or postgres://... (default $DATABASE_URL)
  --table NAME         override table name
  --prefix PREFIX      Redis key prefix
  --config FILE        tier configuration file
  --timeout DURATION   bound on each Redis or database call
  --json               print JSON instead of text
  --version            print the build's version, commit and Go version

Run 'tollgate <command> --help' for a command's flags.
Exit codes: 0 ok, 1 runtime error, 2 usage error.
`)
}

func groupUsage(w io.Writer, group string) {
	fmt.Fprintf(w, "Usage: tollgate %s <command> ...\n\nCommands:\n", group)
	for _, c := range commands {
		if strings.HasPrefix(c.name, group+" ") {
			fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
		}
	}
}

func commandUsage(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: tollgate %s [flags] %s\n\n%s\n", c.name, c.args, c.summary)
	if c.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.details))
	}
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	o := &options{}
	registerCommon(fs, o, c.common, func(string) string { return "" })
	fs.BoolVar(&o.json, "json", false, "print JSON instead of text")
	if c.flags != nil {
		c.flags(fs, o)
	}
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	sort.Strings(names)
	fmt.Fprintln(w, "\nFlags:")
	for _, n := range names {
		f := fs.Lookup(n)
		typ, usage := flag.UnquoteUsage(f)
		head := "  --" + n
		if typ != "" {
			head += " " + typ
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%-26s %s%s\n", head, usage, def)
	}
}
