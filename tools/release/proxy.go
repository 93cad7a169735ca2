package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// buildProxy writes into dir a file-system module proxy (the layout
// GOPROXY=file://dir reads: <module>/@v/list, .info, .mod, .zip) serving
// every published module at v.Version, made from the tree at root. It does
// not read git tags, so it works in a clone without them. With rev empty
// the files come from the working tree (what a developer has); with a git
// revision they come from that commit, exactly what a tag on it will serve.
func buildProxy(root, dir string, v *Versions, rev string) error {
	for _, m := range v.Modules {
		if err := addToProxy(root, dir, m, v.Version, rev); err != nil {
			return fmt.Errorf("proxy %s@%s: %w", modulePath(m), v.Version, err)
		}
	}
	return nil
}

func addToProxy(root, dir, sub, version, rev string) error {
	mv := module.Version{Path: modulePath(sub), Version: version}
	esc, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(vdir, version)

	var gomod []byte
	if rev == "" {
		gomod, err = os.ReadFile(filepath.Join(root, sub, "go.mod"))
	} else {
		gomod, err = git(root, "show", rev+":"+filepath.ToSlash(sub)+"/go.mod")
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".mod", gomod, 0o644); err != nil {
		return err
	}

	zf, err := os.Create(base + ".zip")
	if err != nil {
		return err
	}
	if rev == "" {
		err = modzip.CreateFromDir(zf, mv, filepath.Join(root, sub))
	} else {
		var repo string
		if repo, err = mainWorkTree(root); err == nil {
			err = modzip.CreateFromVCS(zf, mv, repo, rev, filepath.ToSlash(sub))
		}
	}
	if cerr := zf.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}

	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".info", info, 0o644); err != nil {
		return err
	}

	listPath := filepath.Join(vdir, "list")
	list, err := os.ReadFile(listPath)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	return os.WriteFile(listPath, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// git runs git in dir and returns its standard output.
// mainWorkTree is the work tree whose .git directory holds the repository
// of root: root itself, or, when root is a linked worktree (git worktree
// add), the main one. Zipping a tagged revision needs it (the zip package
// recognises only a .git directory); tags are shared by every worktree.
func mainWorkTree(root string) (string, error) {
	out, err := git(root, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil {
		return "", err
	}
	common := strings.TrimSpace(string(out))
	if filepath.Base(common) != ".git" {
		return root, nil // a bare repository, or a layout of its own: as before
	}
	return filepath.Dir(common), nil
}

func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
