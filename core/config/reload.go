package config

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-go/tollgate/core"
	"github.com/tollgate-go/tollgate/core/internal/errs"
	"github.com/tollgate-go/tollgate/core/quota"
)

// DefaultPollInterval is how often a Reloader checks its file for changes.
const DefaultPollInterval = 2 * time.Second

// Reloader keeps a TieredResolver's tiers in step with a configuration file.
// It re-reads the file when its contents change (the file is read and
// hashed every poll interval, so an editor's rename-into-place and an
// in-place rewrite are both seen; a file that changes while it is read is
// read again; a changed file is applied once two polls at least half an
// interval apart find the same contents and modification time, so a
// change takes effect within two intervals, and a writer that pauses less
// than half an interval between its writes is never applied half-written),
// and on the signals given with
// [WithSignals] (none by default: a library does not take a process's
// signals unless asked), and swaps the new tiers in with
// [quota.TieredResolver.SetTiers]: one atomic pointer store, so requests in
// flight see either the old tiers or the new, never a mix, and none fails.
//
// Writers should still write a temporary file and rename it into place: a
// file rewritten in place by a writer that pauses longer can be caught
// between two writes, and its first part may be valid on its own. A forced
// reload (a signal, [Reloader.Reload]) applies the file as it reads it.
//
// A file is applied whole or not at all. An invalid file (a syntax error, a
// bad value, a file still changing after a few reads) is refused, and so is a
// valid file whose tiers no longer serve the route table and anonymous tier
// in force (see [Config.CheckReload]: those are fixed until a restart, so a
// file dropping a class that a running route names would fail that route's
// requests). A refused file changes nothing: the previous configuration
// keeps serving, the reason is logged once, kept in [Reloader.LastError],
// counted in [Reloader.ReloadStats] and passed to [WithOnReload], and the
// next change is tried again.
//
// What reloads: the tiers, through the resolver. The other fields are fixed
// when the limiter and the adapters are built (key_prefix, failure_policy,
// timeout, cache_ttl, breaker, local_fallback, deny_cache, shadow,
// shadow_classes, leases, batching, and the gate's routes, grpc_methods,
// header_style and anonymous_tier); a change to them is logged as needing a
// restart. The
// routes and anonymous tier in force are taken to be those of the first
// file the Reloader applies (by [Watch], the file it loads before
// returning), so build the gate from [Reloader.Config] or from the same
// file.
//
// Start it with [Watch], or [NewReloader] and [Reloader.Run]. It is safe for
// concurrent use.
type Reloader struct {
	path     string
	resolver *quota.TieredResolver
	log      *slog.Logger
	interval time.Duration
	signals  []os.Signal
	onReload func(*Config, error)

	mu       sync.Mutex // serialises reloads; guards the fields below
	seen     [sha256.Size]byte
	haveSeen bool
	// pending is a changed file a poll found, not yet applied: a poll
	// applies it only when it finds the same contents and modification
	// time at least half an interval after pending.since.
	pending struct {
		sum   [sha256.Size]byte
		mtime time.Time
		since time.Time
		ok    bool
	}
	lastErr error
	// base is the first configuration applied: its route table and
	// anonymous tier are the ones in the gate until a restart, so every
	// later file is checked against it (Config.CheckReload).
	base *Config

	cur      atomic.Pointer[Config]
	reloads  atomic.Int64
	failures atomic.Int64
	started  atomic.Bool
	done     chan struct{}
}

// ReloadOption configures a Reloader. One given a value it cannot use
// makes NewReloader (and Watch, and Open with WithWatch) fail with an
// error naming it and wrapping core.ErrInvalidConfig; nil options are
// skipped.
type ReloadOption interface{ applyReload(*Reloader) error }

type reloadOptionFunc func(*Reloader) error

func (f reloadOptionFunc) applyReload(r *Reloader) error { return f(r) }

// WithPollInterval sets how often the file is checked for changes; d must
// be positive. Default DefaultPollInterval.
func WithPollInterval(d time.Duration) ReloadOption {
	return reloadOptionFunc(func(r *Reloader) error {
		return errs.SetPositive(&r.interval, "config.WithPollInterval", "poll interval", d)
	})
}

// WithSignals sets the signals that force a reload, for example
// syscall.SIGHUP. Default: none; the file is only polled.
func WithSignals(sigs ...os.Signal) ReloadOption {
	return reloadOptionFunc(func(r *Reloader) error { r.signals = sigs; return nil })
}

// WithReloadLogger sets the logger for reloads and refused files. Default
// slog.Default(); nil is ignored.
func WithReloadLogger(l *slog.Logger) ReloadOption {
	return reloadOptionFunc(func(r *Reloader) error {
		if l != nil {
			r.log = l
		}
		return nil
	})
}

// WithOnReload sets a function called after every reload attempt that read
// a changed file (or was forced): with the new Config and a nil error when
// it was applied, with nil and the reason when it was refused. It runs on
// the reloading goroutine; keep it short. nil is an error.
func WithOnReload(f func(*Config, error)) ReloadOption {
	return reloadOptionFunc(func(r *Reloader) error {
		if f == nil {
			return errs.BadOption("config.WithOnReload", "nil function")
		}
		r.onReload = f
		return nil
	})
}

// NewReloader returns a reloader of the file at path into r. It reads
// nothing yet: call [Reloader.Reload] or [Reloader.Run].
func NewReloader(path string, r *quota.TieredResolver, opts ...ReloadOption) (*Reloader, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: nil resolver", core.ErrInvalidConfig)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: empty configuration path", core.ErrInvalidConfig)
	}
	rl := &Reloader{
		path:     path,
		resolver: r,
		log:      slog.Default(),
		interval: DefaultPollInterval,
		onReload: func(*Config, error) {},
		done:     make(chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			if err := o.applyReload(rl); err != nil {
				return nil, err
			}
		}
	}
	return rl, nil
}

// Watch loads the file at path into r, then keeps reloading it (on change,
// and on the signals of [WithSignals]) until ctx is done. It fails, changing
// nothing, when the file is invalid now. The signals, if any, are being
// watched when it returns.
// [Reloader.Done] is closed when the watch has stopped.
func Watch(ctx context.Context, path string, r *quota.TieredResolver, opts ...ReloadOption) (*Reloader, error) {
	rl, err := NewReloader(path, r, opts...)
	if err != nil {
		return nil, err
	}
	if err := rl.Reload(); err != nil {
		return nil, err
	}
	rl.started.Store(true)
	sig := rl.notify()
	go rl.run(ctx, sig)
	return rl, nil
}

// Run reloads the file on change (and on the signals of [WithSignals]) until ctx is done, then
// returns nil. It does not load the file first; see [Watch]. A Reloader
// runs once: a second Run fails.
func (rl *Reloader) Run(ctx context.Context) error {
	if !rl.started.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: reloader of %s is already running", core.ErrInvalidConfig, rl.path)
	}
	rl.run(ctx, rl.notify())
	return nil
}

func (rl *Reloader) notify() chan os.Signal {
	sig := make(chan os.Signal, 1)
	if len(rl.signals) > 0 {
		signal.Notify(sig, rl.signals...)
	}
	return sig
}

func (rl *Reloader) run(ctx context.Context, sig chan os.Signal) {
	defer close(rl.done)
	defer signal.Stop(sig)
	tick := time.NewTicker(rl.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sig:
			rl.log.Info("tollgate: reloading configuration", "path", rl.path, "signal", s.String())
			_, _ = rl.reload(true)
		case <-tick.C:
			_, _ = rl.reload(false)
		}
	}
}

// Done is closed when a watch started by [Watch] or [Reloader.Run] has
// stopped.
func (rl *Reloader) Done() <-chan struct{} { return rl.done }

// Reload reads the file now and applies it if it is valid. On error the
// previous configuration stays in force and the error says why.
func (rl *Reloader) Reload() error {
	_, err := rl.reload(true)
	return err
}

// Config returns the last file applied, or nil before the first successful
// load. Its tiers are in force; its other fields are what a restart would
// build (see [Reloader]).
func (rl *Reloader) Config() *Config { return rl.cur.Load() }

// LastError returns why the last reload was refused, or nil when it was
// applied.
func (rl *Reloader) LastError() error {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return rl.lastErr
}

// ReloadStats returns how many files were applied and how many refused.
func (rl *Reloader) ReloadStats() (applied, refused int64) {
	return rl.reloads.Load(), rl.failures.Load()
}

// reload reads the file and applies it when it changed since the last read
// (or when forced). It reports whether a new configuration was applied.
func (rl *Reloader) reload(force bool) (bool, error) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	data, mtime, err := readFileTime(rl.path)
	if err != nil {
		rl.pending.ok = false
		return false, rl.refuse(err, force)
	}
	sum := sha256.Sum256(data)
	if !force && rl.haveSeen && sum == rl.seen {
		rl.pending.ok = false
		return false, nil
	}
	if !force && !rl.settled(sum, mtime) {
		return false, nil
	}
	rl.pending.ok = false
	rl.seen, rl.haveSeen = sum, true
	cfg, err := Parse(rl.path, data)
	if err == nil && rl.base != nil {
		err = rl.base.CheckReload(cfg)
	}
	if err == nil {
		err = rl.resolver.SetTiers(cfg.Tiers)
	}
	if err != nil {
		return false, rl.refuse(err, true)
	}
	if rl.base == nil {
		rl.base = cfg
	}
	old := rl.cur.Swap(cfg)
	rl.lastErr = nil
	rl.reloads.Add(1)
	rl.log.Info("tollgate: configuration applied", "path", rl.path, "tiers", len(cfg.Tiers.Tiers),
		"routes", len(cfg.Routes), "grpc_methods", len(cfg.GRPCMethods))
	if old != nil {
		if fixed := restartFields(old, cfg); len(fixed) > 0 {
			rl.log.Warn("tollgate: configuration fields changed that take effect only at restart",
				"path", rl.path, "fields", strings.Join(fixed, ", "))
		}
	}
	rl.onReload(cfg, nil)
	return true, nil
}

// settled reports whether a changed file (contents sum, modification time
// mtime) has stayed the same for at least half a poll interval, by this
// process's clock: a writer rewriting the file in place, pausing between
// its writes, would otherwise have its first part applied, which may be a
// valid file on its own. The first poll that sees a change only notes it.
func (rl *Reloader) settled(sum [sha256.Size]byte, mtime time.Time) bool {
	now := time.Now()
	p := &rl.pending
	if !p.ok || p.sum != sum || !p.mtime.Equal(mtime) {
		p.sum, p.mtime, p.since, p.ok = sum, mtime, now, true
		return false
	}
	return now.Sub(p.since) >= rl.interval/2
}

// refuse records a refused reload. It logs when told to, or when the reason
// is new (a file that stays missing is not logged every poll).
func (rl *Reloader) refuse(err error, log bool) error {
	if log || rl.lastErr == nil || rl.lastErr.Error() != err.Error() {
		rl.failures.Add(1)
		rl.log.Warn("tollgate: configuration refused; keeping the previous one", "path", rl.path, "err", err)
		rl.onReload(nil, err)
	}
	rl.lastErr = err
	return err
}

// restartFields lists the fields that differ between a and b and are fixed
// when a limiter is built.
func restartFields(a, b *Config) []string {
	var out []string
	for _, f := range []struct {
		name string
		same bool
	}{
		{"key_prefix", a.KeyPrefix == b.KeyPrefix},
		{"failure_policy", a.FailurePolicy == b.FailurePolicy},
		{"timeout", a.Timeout == b.Timeout},
		{"header_style", a.HeaderStyle == b.HeaderStyle},
		{"cache_ttl", a.CacheTTL == b.CacheTTL},
		{"routes", maps.Equal(a.Routes, b.Routes)},
		{"grpc_methods", maps.Equal(a.GRPCMethods, b.GRPCMethods)},
		{"anonymous_tier", a.AnonymousTier == b.AnonymousTier},
		{"breaker", reflect.DeepEqual(a.Breaker, b.Breaker)},
		{"local_fallback", a.LocalFallback == b.LocalFallback},
		{"deny_cache", a.DenyCache == b.DenyCache},
		{"shadow", a.Shadow == b.Shadow},
		{"shadow_classes", slices.Equal(a.ShadowClasses, b.ShadowClasses)},
		{"leases", maps.Equal(a.Leases, b.Leases)},
		{"batching", a.Batching == b.Batching},
	} {
		if !f.same {
			out = append(out, f.name)
		}
	}
	return out
}
