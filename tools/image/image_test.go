package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImage builds the image from the tree as CI does, reads it back from
// its OCI layout, and runs its entrypoint from the image's own filesystem:
// chrooted into it, as the image's user, when the test runs as root.
func TestImage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	o := options{out: filepath.Join(dir, "oci"), tar: filepath.Join(dir, "image.tar"), ref: defaultRef,
		arch: "amd64", cacerts: "/etc/ssl/certs/ca-certificates.crt", root: root}
	if _, err := os.Stat(o.cacerts); err != nil {
		t.Fatalf("the build machine's CA bundle: %v (Debian: apt-get install ca-certificates)", err)
	}
	digest, err := run(o)
	if err != nil {
		t.Fatal(err)
	}

	// reproducible: the same tree builds the same image
	again, err := run(options{out: filepath.Join(dir, "oci2"), ref: defaultRef, arch: o.arch, cacerts: o.cacerts, root: root})
	if err != nil {
		t.Fatal(err)
	}
	if again != digest {
		t.Errorf("two builds of one tree: digests %s and %s", digest, again)
	}

	img := readLayout(t, o.out)
	if d, _ := img.Digest(); d.String() != digest {
		t.Errorf("the layout holds %s, the build said %s", d, digest)
	}
	fromTar, err := tarball.ImageFromPath(o.tar, nil)
	if err != nil {
		t.Fatal(err)
	}
	// a tarball has no manifest of its own (docker load writes one): its
	// config names the same image
	if a, b := configName(t, fromTar), configName(t, img); a != b {
		t.Errorf("the tarball's config is %s, the layout's %s", a, b)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" {
		t.Errorf("user %q, want the non-root 65532:65532", cf.Config.User)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/usr/local/bin/tollgate-rls" {
		t.Errorf("entrypoint %q", got)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}

	fs := filepath.Join(dir, "rootfs")
	extract(t, img, fs)
	for _, p := range []string{binPath, caPath, "etc/passwd", "etc/group"} {
		if fi, err := os.Stat(filepath.Join(fs, p)); err != nil || fi.Size() == 0 {
			t.Errorf("/%s: %v", p, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(fs, linkPath)); err != nil || target != "/"+binPath {
		t.Errorf("/%s links to %q (%v), want /%s", linkPath, target, err, binPath)
	}
	if interp := interpreter(t, filepath.Join(fs, binPath)); interp != "" {
		t.Errorf("the binary is dynamically linked (interpreter %s); the image has no libc", interp)
	}

	// the entrypoint, from the image's filesystem, at the path Envoy
	// Gateway runs
	cmd := exec.Command("/"+linkPath, "--help")
	cmd.Env = cf.Config.Env
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: fs,
			Credential: &syscall.Credential{Uid: nonrootID, Gid: nonrootID}}
		cmd.Dir = "/"
	} else {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI runs as root, to run the image chrooted")
		}
		t.Logf("not root: running %s outside a chroot", binPath)
		cmd.Path = filepath.Join(fs, binPath)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s --help: %v\n%s", linkPath, err, out)
	}
	if !bytes.Contains(out, []byte("tollgate-rls")) {
		t.Errorf("%s --help printed:\n%s", linkPath, out)
	}
}

func configName(t *testing.T, img v1.Image) string {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func readLayout(t *testing.T, path string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("the layout holds %d manifests, want 1", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// extract writes the image's flattened filesystem to dir.
func extract(t *testing.T, img v1.Image, dir string) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("entry %q leaves the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
			if os.Geteuid() == 0 {
				if err := os.Chown(p, h.Uid, h.Gid); err != nil {
					t.Fatal(err)
				}
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, os.FileMode(h.Mode).Perm()); err != nil {
				t.Fatal(err)
			}
		case tar.TypeSymlink:
			if err := os.Symlink(h.Linkname, p); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("entry %q: unexpected type %c", h.Name, h.Typeflag)
		}
	}
}

func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return string(bytes.TrimRight(b, "\x00"))
		}
	}
	return ""
}
