package main

import (
	"context"
	"fmt"
	"os"
	"strings"
)

// cut releases every published module at version:
//  1. refuses a dirty tree;
//  2. versions.yaml names version (previous: the old one), the go.mod
//     files and go.work follow it (sync), committed as "release: version";
//  3. the consumer check runs on that commit, the API check against the
//     last release;
//  4. tags <module>/<version> on that commit.
//
// Run again, it does nothing already done: no empty commit, and a tag that
// exists on the release commit is kept. A tag on another commit is an
// error, unless retag (for a release not pushed yet, cut again after a
// rebase or merge).
func cut(ctx context.Context, root, version string, retag bool) error {
	if err := checkVersion(version); err != nil {
		return err
	}
	if out, err := git(root, "status", "--porcelain"); err != nil {
		return err
	} else if len(out) > 0 {
		return fmt.Errorf("the tree has uncommitted changes; commit or stash them first:\n%s", out)
	}
	if _, err := setVersion(root, version); err != nil {
		return err
	}
	v, err := readVersions(root)
	if err != nil {
		return err
	}
	if _, err := syncModFiles(root, v); err != nil {
		return err
	}
	if out, err := git(root, "status", "--porcelain"); err != nil {
		return err
	} else if len(out) > 0 {
		if _, err := git(root, "commit", "-q", "-a", "-m", "release: "+version+"\n\nversions.yaml, go.mod files and go.work at "+version+" (go run ./tools/release cut)."); err != nil {
			return err
		}
		fmt.Println("committed release:", version)
	}
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	rev := strings.TrimSpace(string(head))

	work, err := os.MkdirTemp("", "tollgate-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	fmt.Printf("consumer check of %s at %.12s\n", version, rev)
	if _, err := checkConsumers(ctx, root, work, v, rev, nil, os.Stdout); err != nil {
		return fmt.Errorf("consumer check: %w (nothing tagged)", err)
	}
	if err := runAPIDiff(ctx, root, v, os.Stdout); err != nil {
		return fmt.Errorf("%w (nothing tagged)", err)
	}

	tags := v.tags(version)
	for _, t := range tags {
		at, err := git(root, "rev-parse", "--verify", "--quiet", "refs/tags/"+t+"^{commit}")
		switch {
		case err != nil: // no such tag
			if _, err := git(root, "tag", "-a", "-m", t, t, rev); err != nil {
				return err
			}
			fmt.Println("tagged", t)
		case strings.TrimSpace(string(at)) == rev:
			fmt.Println("kept", t, "(already on the release commit)")
		case retag:
			if _, err := git(root, "tag", "-f", "-a", "-m", t, t, rev); err != nil {
				return err
			}
			fmt.Println("moved", t)
		default:
			return fmt.Errorf("tag %s exists on %.12s, not on the release commit %.12s; if it was never pushed, cut again with -retag (make release VERSION=%s RETAG=1)", t, at, rev, version)
		}
	}
	fmt.Printf("\nrelease %s is ready. Publish it (the branch first, then the tags):\n  git push origin HEAD\n  git push origin %s\n", version, strings.Join(tags, " "))
	fmt.Printf("Then record it for clones without tags: under released in %s, add\n  %s: %s\n", versionsFile, version, rev)
	return nil
}
