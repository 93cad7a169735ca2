package main

import (
	"context"
	"encoding/json"
	"fmt"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
	"golang.org/x/tools/go/packages"
)

// runAPIDiff reports the API changes of every published module since the
// last release and fails on an incompatible one, unless versions.yaml
// allows it by name or its version is a breaking bump from that release
// (a new major version; from v0, a new minor one).
//
// The last release is versions.yaml's version if it is out already (a
// local tag <module>/<version>, the commit versions.yaml's released list
// names for it, or the module proxy serves it), else its
// previous; with neither, this is the first release and there is nothing
// to compare.
func runAPIDiff(ctx context.Context, root string, v *Versions, w io.Writer) error {
	base := ""
	for _, cand := range []string{v.Version, v.Previous} {
		if cand == "" {
			continue
		}
		ok, err := released(ctx, root, v, v.Modules[0], cand)
		if err != nil {
			return err
		}
		if ok {
			base = cand
			break
		}
		if cand == v.Previous {
			return fmt.Errorf("apidiff: %s names previous release %s, but neither a tag %s/%s, nor a commit under released in %s, nor the module proxy has it", versionsFile, cand, v.Modules[0], cand, versionsFile)
		}
	}
	if base == "" {
		fmt.Fprintf(w, "apidiff: skipped: %s is the first release (%s names no previous one and %s is not out yet), nothing to compare against\n", v.Version, versionsFile, v.Version)
		return nil
	}
	bump := breakingBump(base, v.Version)
	// the modules tagged here at base, served to the old modules' builds:
	// before the tags are pushed, no module proxy has them
	tmp, err := os.MkdirTemp("", "tollgate-apidiff-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxyDir := filepath.Join(tmp, "proxy")
	for _, m := range v.Modules {
		if ref := releaseRef(root, v, m, base); ref != "" && hasModule(root, ref, m) {
			if err := addToProxy(root, proxyDir, m, base, ref); err != nil {
				return fmt.Errorf("apidiff: %s at %s (%s): %w", m, base, ref, err)
			}
		}
	}
	goproxy, err := goEnv("GOPROXY")
	if err != nil {
		return err
	}
	// the old modules build in a module cache of their own: a version of
	// ours that an experiment left in this machine's cache (same version,
	// other contents) would otherwise be used, and the go command's index
	// of that cache assumes a version's files never change. The machine's
	// downloads still serve third-party modules without the network.
	chain := "file://" + filepath.ToSlash(proxyDir)
	if modcache, err := goEnv("GOMODCACHE"); err == nil && modcache != "" {
		chain += ",file://" + filepath.ToSlash(filepath.Join(modcache, "cache", "download"))
	}
	oldEnv := []string{"GOWORK=off", "GOFLAGS=-mod=mod -modcacherw", "GONOSUMDB=" + modulePrefix + "/*",
		"GOMODCACHE=" + filepath.Join(tmp, "modcache"), "GOPROXY=" + chain + "," + goproxy}
	var refused []string
	for _, m := range v.Modules {
		ok, err := released(ctx, root, v, m, base)
		if err != nil {
			return err
		}
		if !ok {
			fmt.Fprintf(w, "apidiff: %s: new since %s, nothing to compare\n", m, base)
			continue
		}
		changes, err := moduleChanges(ctx, root, releaseRef(root, v, m, base), m, base, oldEnv)
		if err != nil {
			return fmt.Errorf("apidiff %s: %w", m, err)
		}
		n := 0
		for _, c := range changes.Changes {
			if c.Compatible {
				continue
			}
			n++
			msg := m + ": " + c.Message
			switch {
			case slices.Contains(v.AllowIncompatible, msg):
				fmt.Fprintf(w, "apidiff: allowed by %s: %s\n", versionsFile, msg)
			case bump:
				fmt.Fprintf(w, "apidiff: accepted by the bump %s -> %s: %s\n", base, v.Version, msg)
			default:
				refused = append(refused, msg)
			}
		}
		fmt.Fprintf(w, "apidiff: %s: %d incompatible change(s) since %s\n", m, n, base)
	}
	if len(refused) > 0 {
		return fmt.Errorf("incompatible API changes since %s:\n  %s\nundo them, or accept each by adding its line to allow-incompatible in %s, or release a breaking version (make release VERSION=...)",
			base, strings.Join(refused, "\n  "), versionsFile)
	}
	return nil
}

// breakingBump reports whether going from base to next may break the API:
// a new major version, or from v0 a new minor version.
func breakingBump(base, next string) bool {
	if semver.Major(next) != semver.Major(base) {
		return true
	}
	return semver.Major(base) == "v0" && semver.MajorMinor(next) != semver.MajorMinor(base)
}

func tagExists(root, tag string) bool {
	_, err := git(root, "rev-parse", "--verify", "--quiet", "refs/tags/"+tag)
	return err == nil
}

// releaseRef is the git revision module m was released from at version:
// its tag, else the commit versions.yaml's released list names (a clone
// may carry no tags), when this repository has it; "" when neither.
func releaseRef(root string, v *Versions, m, version string) string {
	if tag := m + "/" + version; tagExists(root, tag) {
		return tag
	}
	if c := v.Released[version]; c != "" {
		if _, err := git(root, "cat-file", "-e", c+"^{commit}"); err == nil {
			return c
		}
	}
	return ""
}

// hasModule reports whether module m was published at the git revision
// ref: listed under modules in that revision's versions.yaml (a module
// could exist then without being released).
func hasModule(root, ref, m string) bool {
	b, err := git(root, "show", ref+":"+versionsFile)
	if err != nil {
		return false
	}
	var old Versions
	if yaml.Unmarshal(b, &old) != nil {
		return false
	}
	return slices.Contains(old.Modules, m)
}

// released reports whether module m is out at version: tagged here,
// recorded in versions.yaml at a commit this repository has (and m existed
// there), or served by the module proxy. Not reaching the proxy is an
// error.
func released(ctx context.Context, root string, v *Versions, m, version string) (bool, error) {
	if ref := releaseRef(root, v, m, version); ref != "" {
		return hasModule(root, ref, m), nil
	}
	if tagExists(root, m+"/"+version) {
		return true, nil
	}
	err := served(ctx, m, version)
	if err == nil {
		return true, nil
	}
	if notFound(err) {
		return false, nil
	}
	return false, err
}

type downloaded struct {
	Dir   string
	Error string
}

func download(ctx context.Context, m, version string) (*downloaded, error) {
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modulePath(m)+"@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GONOSUMDB="+modulePrefix+"/*")
	cmd.Dir = os.TempDir()
	out, _ := cmd.Output()
	var d downloaded
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %s", modulePath(m), version, out)
	}
	if d.Error != "" {
		return nil, fmt.Errorf("go mod download %s@%s: %s", modulePath(m), version, d.Error)
	}
	return &d, nil
}

// served asks the module proxy for module m at version, past this
// machine's module cache: a version that a local experiment put in the
// cache (a consumer check, a cut in a scratch clone) is not a release.
func served(ctx context.Context, m, version string) error {
	cache, err := os.MkdirTemp("", "tollgate-served-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache) // -modcacherw keeps it removable
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", modulePath(m)+"@"+version)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GONOSUMDB="+modulePrefix+"/*", "GOMODCACHE="+cache, "GOFLAGS=-modcacherw")
	cmd.Dir = os.TempDir()
	out, _ := cmd.Output()
	var d downloaded
	if err := json.Unmarshal(out, &d); err != nil {
		return fmt.Errorf("go mod download %s@%s: %s", modulePath(m), version, out)
	}
	if d.Error != "" {
		return fmt.Errorf("go mod download %s@%s: %s", modulePath(m), version, d.Error)
	}
	return nil
}

// notFound reports whether a go mod download failed because the version
// does not exist (a proxy may answer 403, 404 or 410 for that).
func notFound(err error) bool {
	s := err.Error()
	for _, t := range []string{"not found", "410 Gone", "404 Not Found", "403 Forbidden", "unknown revision", "invalid version"} {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

// moduleChanges compares module m at release base (from the git revision
// ref when there is one, else the module proxy) with the working tree.
func moduleChanges(ctx context.Context, root, ref, m, base string, oldEnv []string) (apidiff.Report, error) {
	tmp, err := os.MkdirTemp("", "tollgate-apidiff-")
	if err != nil {
		return apidiff.Report{}, err
	}
	defer os.RemoveAll(tmp)
	oldDir := filepath.Join(tmp, "old")
	if ref != "" {
		if err := os.MkdirAll(oldDir, 0o755); err != nil {
			return apidiff.Report{}, err
		}
		archive := exec.CommandContext(ctx, "sh", "-c", `git archive "$1" "$2" | tar -x -C "$3" --strip-components="$4"`, "sh",
			ref, m, oldDir, fmt.Sprint(strings.Count(m, "/")+1))
		archive.Dir = root
		if out, err := archive.CombinedOutput(); err != nil {
			return apidiff.Report{}, fmt.Errorf("git archive %s: %v: %s", ref, err, out)
		}
	} else {
		d, err := download(ctx, m, base)
		if err != nil {
			return apidiff.Report{}, err
		}
		if err := os.CopyFS(oldDir, os.DirFS(d.Dir)); err != nil {
			return apidiff.Report{}, err
		}
	}
	oldPkgs, err := loadAPI(ctx, oldDir, modulePath(m), oldEnv)
	if err != nil {
		return apidiff.Report{}, fmt.Errorf("%s at %s: %w", m, base, err)
	}
	newPkgs, err := loadAPI(ctx, filepath.Join(root, m), modulePath(m), nil)
	if err != nil {
		return apidiff.Report{}, fmt.Errorf("%s in the tree: %w", m, err)
	}
	return apidiff.ModuleChanges(
		&apidiff.Module{Path: modulePath(m), Packages: oldPkgs},
		&apidiff.Module{Path: modulePath(m), Packages: newPkgs}), nil
}

// loadAPI type-checks the importable packages of the module at dir:
// no commands, no internal packages, nothing of a nested module.
func loadAPI(ctx context.Context, dir, path string, env []string) ([]*types.Package, error) {
	cfg := &packages.Config{
		Context: ctx,
		Mode:    packages.NeedName | packages.NeedTypes | packages.NeedModule,
		Dir:     dir,
		Env:     append(os.Environ(), env...),
	}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		return nil, err
	}
	var out []*types.Package
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			return nil, fmt.Errorf("%s: %v", p.PkgPath, p.Errors[0])
		}
		if p.Module == nil || p.Module.Path != path || p.Name == "main" || strings.Contains(p.PkgPath+"/", "/internal/") {
			continue
		}
		out = append(out, p.Types)
	}
	return out, nil
}
