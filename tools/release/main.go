// Command release cuts and checks releases of tollgate's published
// modules, all at the version versions.yaml names (docs/releasing.md).
//
//	release sync [-check]         go.mod files and go.work follow versions.yaml
//	release consumer [-rev R]     play a user: go get each published module from
//	                              a module proxy built from the tree, build, install
//	release apidiff               incompatible API changes since the last release
//	release cut -version vX.Y.Z   all of it, then commit and tag <module>/vX.Y.Z
//
// Run it from anywhere in the repository; make release, make consumer and
// make apidiff do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, errSkip) {
			fmt.Fprintln(os.Stderr, "release: SKIP:", err)
			return
		}
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

const usage = `usage: release <command> [flags]

commands:
  sync [-check]          set inter-module requirements to versions.yaml's version,
                         drop published modules' replaces, keep go.work's replaces
  consumer [-rev REV] [-only m1,m2]
                         go get, build and install each published module as a user
                         would, from a module proxy built from the tree (REV: a git
                         revision; default the working tree)
  proxy -dir DIR [-rev REV]
                         write the module proxy the consumer check builds to DIR and
                         keep it, then print the environment that go gets from it
  apidiff                report incompatible API changes against the last release
  cut -version vX.Y.Z [-retag]
                         release: versions.yaml, go.mod files, commit, checks, tags

RELEASE_VERBOSE=1 prints each go command of the consumer check and its time.`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, usage)
		return errors.New("no command")
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	switch cmd {
	case "sync":
		check := fs.Bool("check", false, "only report go.mod files or go.work that do not follow versions.yaml")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return runSync(root, *check)
	case "consumer":
		rev := fs.String("rev", "", "git revision to build the modules from (default: the working tree)")
		only := fs.String("only", "", "comma-separated module directories to check (default: every published module)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		var list []string
		if *only != "" {
			list = strings.Split(*only, ",")
		}
		return runConsumer(ctx, root, *rev, list)
	case "proxy":
		dir := fs.String("dir", "", "the folder to write the module proxy to (created; files of the same versions are replaced)")
		rev := fs.String("rev", "", "git revision to build the modules from (default: the working tree)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		if *dir == "" {
			return errors.New("proxy: -dir is required")
		}
		return runProxy(root, *dir, *rev, os.Stdout)
	case "apidiff":
		if err := fs.Parse(args); err != nil {
			return err
		}
		v, err := readVersions(root)
		if err != nil {
			return err
		}
		return runAPIDiff(ctx, root, v, os.Stdout)
	case "cut":
		version := fs.String("version", "", "the release, e.g. v0.2.0")
		retag := fs.Bool("retag", false, "move this release's tags that exist on another commit (only before they are pushed)")
		if err := fs.Parse(args); err != nil {
			return err
		}
		return cut(ctx, root, *version, *retag)
	}
	fmt.Fprintln(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", cmd)
}

// repoRoot is the directory holding versions.yaml: the working directory
// or the nearest parent that has it.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, versionsFile)); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no %s in %s or a parent", versionsFile, dir)
		}
	}
}

func runSync(root string, check bool) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	if check {
		// work on a copy of the mod files: report, do not write
		tmp, err := os.MkdirTemp("", "release-sync-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if err := copyModFiles(root, tmp); err != nil {
			return err
		}
		root = tmp
	}
	changed, err := syncModFiles(root, v)
	if err != nil {
		return err
	}
	if check && len(changed) > 0 {
		return fmt.Errorf("these files do not follow %s (version %s); run make release-sync:\n  %s", versionsFile, v.Version, strings.Join(changed, "\n  "))
	}
	for _, c := range changed {
		fmt.Println("updated", c)
	}
	return nil
}

// copyModFiles copies versions.yaml, go.work and every go.mod under root
// into dst, at the same relative paths.
func copyModFiles(root, dst string) error {
	dirs, err := goModDirs(root)
	if err != nil {
		return err
	}
	files := []string{versionsFile, "go.work"}
	for _, d := range dirs {
		files = append(files, filepath.Join(d, "go.mod"))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dst, f)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runProxy writes the module proxy of the tree to dir and prints the
// README's lines for trying the modules before a release (the ones the
// consumer check runs), with dir in place of the README's folder.
func runProxy(root, dir, rev string, out io.Writer) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	tl, err := readTryLines(root, v)
	if err != nil {
		return err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if err := buildProxy(root, abs, v, rev); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote the modules of %s at %s to %s; in an empty folder outside this repository (%s, %q):\n\n%s",
		modulePrefix, v.Version, abs, readmeFile, strings.TrimPrefix(readmeSection, "## "), tl.forProxy(abs))
	return nil
}

func runConsumer(ctx context.Context, root, rev string, only []string) error {
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "tollgate-consumer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	_, err = checkConsumers(ctx, root, work, v, rev, only, os.Stdout)
	return err
}
