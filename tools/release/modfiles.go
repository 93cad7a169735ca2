package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// goModDirs lists, relative to root and sorted, every directory below root
// holding a go.mod: published, test-only and unpublished modules alike.
func goModDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "go.mod" {
			rel, err := filepath.Rel(root, filepath.Dir(p))
			if err != nil {
				return err
			}
			if rel != "." {
				dirs = append(dirs, rel)
			}
		}
		return nil
	})
	slices.Sort(dirs)
	return dirs, err
}

// ours reports whether a module path is one of this repository's modules.
func ours(path string) bool { return strings.HasPrefix(path, modulePrefix+"/") }

// syncModFiles makes the tree's go.mod files and go.work follow v:
//   - every requirement on a published module names v.Version, in every
//     go.mod of the tree (published, test-only, examples, bench);
//   - published modules carry no replace directive for this repository's
//     modules (their users never see replaces; go.work serves local work);
//   - go.work uses every published module and replaces none of ours: a
//     workspace module stands in for every version of itself, so a
//     workspace build never asks the module proxy for one.
//
// It returns the files it changed (relative to root). Only requirement
// versions and replace lines are touched.
func syncModFiles(root string, v *Versions) ([]string, error) {
	dirs, err := goModDirs(root)
	if err != nil {
		return nil, err
	}
	for _, m := range v.Modules {
		if !slices.Contains(dirs, m) {
			return nil, fmt.Errorf("%s lists module %s, but %s/go.mod does not exist", versionsFile, m, m)
		}
	}
	var changed []string
	for _, dir := range dirs {
		p := filepath.Join(root, dir, "go.mod")
		c, err := syncFile(p, func(old []byte) ([]byte, error) { return syncGoMod(p, dir, old, v) })
		if err != nil {
			return nil, err
		}
		if c {
			changed = append(changed, filepath.Join(dir, "go.mod"))
		}
	}
	p := filepath.Join(root, "go.work")
	c, err := syncFile(p, func(old []byte) ([]byte, error) { return syncGoWork(p, old, v) })
	if err != nil {
		return nil, err
	}
	if c {
		changed = append(changed, "go.work")
	}
	return changed, nil
}

// syncFile rewrites the file p with what update makes of its contents, if
// that differs, and reports whether it did.
func syncFile(p string, update func(old []byte) ([]byte, error)) (bool, error) {
	old, err := os.ReadFile(p)
	if err != nil {
		return false, err
	}
	out, err := update(old)
	if err != nil {
		return false, err
	}
	if bytes.Equal(out, old) {
		return false, nil
	}
	return true, os.WriteFile(p, out, 0o644)
}

// syncGoMod returns the go.mod file p of module dir, whose contents are
// old, as v wants it.
func syncGoMod(p, dir string, old []byte, v *Versions) ([]byte, error) {
	f, err := modfile.Parse(p, old, nil)
	if err != nil {
		return nil, err
	}
	if f.Module == nil || f.Module.Mod.Path != modulePath(dir) {
		return nil, fmt.Errorf("%s: module path is not %s", p, modulePath(dir))
	}
	isPublished := v.published(f.Module.Mod.Path)
	for _, r := range f.Require {
		path := r.Mod.Path
		if !ours(path) {
			continue
		}
		if !v.published(path) {
			if isPublished {
				return nil, fmt.Errorf("%s: published module %s requires %s, which %s does not list as published", p, f.Module.Mod.Path, path, versionsFile)
			}
			continue
		}
		if r.Mod.Version != v.Version {
			if err := f.AddRequire(path, v.Version); err != nil {
				return nil, err
			}
		}
	}
	if isPublished {
		for _, r := range slices.Clone(f.Replace) {
			if !ours(r.Old.Path) {
				return nil, fmt.Errorf("%s: published module replaces %s; its users would not see that replace", p, r.Old.Path)
			}
			if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return nil, err
			}
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, err
	}
	return tidyBlankLines(out), nil
}

// tidyBlankLines squeezes the runs of blank lines a dropped block leaves.
func tidyBlankLines(b []byte) []byte {
	for bytes.Contains(b, []byte("\n\n\n")) {
		b = bytes.ReplaceAll(b, []byte("\n\n\n"), []byte("\n\n"))
	}
	return b
}

// syncGoWork returns the go.work file p, whose contents are old, as v
// wants it.
func syncGoWork(p string, old []byte, v *Versions) ([]byte, error) {
	w, err := modfile.ParseWork(p, old, nil)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, u := range w.Use {
		used[filepath.Clean(u.Path)] = true
	}
	for _, m := range v.Modules {
		if !used[m] {
			return nil, fmt.Errorf("go.work does not use published module %s: run go work use ./%s", m, m)
		}
	}
	// drop our modules' replaces, which a workspace does not need
	for _, r := range slices.Clone(w.Replace) {
		if ours(r.Old.Path) {
			if err := w.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return nil, err
			}
		}
	}
	w.Cleanup()
	out := tidyBlankLines(modfile.Format(w.Syntax))
	if _, err := modfile.ParseWork(p, out, nil); err != nil {
		return nil, fmt.Errorf("rewriting go.work: %w", err)
	}
	return out, nil
}
