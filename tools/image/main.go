// Command image builds the tollgate-rls container image from the tree,
// without a Docker daemon and without pulling a base image: one layer on an
// empty base holding the static binary, CA certificates and a non-root user,
// written as an OCI image layout (and optionally a tarball for `docker load`,
// or pushed to a registry).
//
//	go run ./tools/image -out dist/tollgate-rls                 # OCI layout
//	go run ./tools/image -tar dist/tollgate-rls.tar             # docker load -i
//	go run ./tools/image -push ghcr.io/acme/tollgate-rls:v0.3.0 # a registry
//
// The image is reproducible: the same tree and Go toolchain give the same
// digest (every file time is SOURCE_DATE_EPOCH, default 0). Its layout:
//
//	/usr/local/bin/tollgate-rls   the entrypoint (CGO_ENABLED=0, -trimpath)
//	/bin/ratelimit                a link to it, the path Envoy Gateway runs
//	/etc/ssl/certs/ca-certificates.crt   the build machine's CA bundle
//	/etc/passwd, /etc/group       root and nonroot (65532), as distroless
//	/home/nonroot, /tmp
//
// It runs as 65532:65532 (distroless's nonroot).
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths inside the image.
const (
	binPath    = "usr/local/bin/tollgate-rls"
	linkPath   = "bin/ratelimit"
	caPath     = "etc/ssl/certs/ca-certificates.crt"
	nonrootID  = 65532
	pkgPath    = "./rls/cmd/tollgate-rls"
	defaultRef = "tollgate-rls:dev"
)

func main() {
	var o options
	flag.StringVar(&o.out, "out", "", "write the image as an OCI image layout in this folder")
	flag.StringVar(&o.tar, "tar", "", "write the image as a tarball for `docker load -i`")
	flag.StringVar(&o.push, "push", "", "push the image to this reference (credentials from the docker config)")
	flag.StringVar(&o.ref, "tag", defaultRef, "the image reference recorded in the tarball")
	flag.StringVar(&o.arch, "arch", "amd64", "GOARCH of the binary and the image")
	flag.StringVar(&o.cacerts, "cacerts", "/etc/ssl/certs/ca-certificates.crt", "the CA bundle to copy into the image")
	flag.StringVar(&o.root, "C", ".", "the repository root (the folder holding go.work)")
	flag.Parse()
	if o.out == "" && o.tar == "" && o.push == "" {
		fmt.Fprintln(os.Stderr, "image: name at least one of -out, -tar, -push")
		os.Exit(2)
	}
	digest, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
	fmt.Println(digest)
}

type options struct {
	out, tar, push, ref, arch, cacerts, root string
}

// run builds the image and writes it where o says; it returns its digest.
func run(o options) (string, error) {
	img, err := build(o)
	if err != nil {
		return "", err
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	if o.out != "" {
		if err := os.RemoveAll(o.out); err != nil {
			return "", err
		}
		p, err := layout.Write(o.out, empty.Index)
		if err != nil {
			return "", err
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
			"org.opencontainers.image.ref.name": o.ref,
		})); err != nil {
			return "", err
		}
	}
	if o.tar != "" {
		ref, err := name.ParseReference(o.ref)
		if err != nil {
			return "", fmt.Errorf("-tag: %w", err)
		}
		if err := os.MkdirAll(filepath.Dir(o.tar), 0o755); err != nil {
			return "", err
		}
		if err := tarball.WriteToFile(o.tar, ref, img); err != nil {
			return "", err
		}
	}
	if o.push != "" {
		ref, err := name.ParseReference(o.push)
		if err != nil {
			return "", fmt.Errorf("-push: %w", err)
		}
		if err := remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return "", err
		}
	}
	return d.String(), nil
}

// build compiles tollgate-rls and assembles the image.
func build(o options) (v1.Image, error) {
	epoch, err := sourceDateEpoch()
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(o.cacerts)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	bin, version, err := compile(o.root, o.arch)
	if err != nil {
		return nil, err
	}
	layerTar, err := filesystem(bin, ca, epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "tools/image: tollgate-rls " + version},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = o.arch, "linux"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", nonrootID, nonrootID),
		Entrypoint: []string{"/" + binPath},
		WorkingDir: "/home/nonroot",
		Env: []string{
			"PATH=/usr/local/bin:/bin",
			"SSL_CERT_FILE=/" + caPath,
		},
		// the reference's ports: HTTP (/healthcheck, /json) 8080, gRPC
		// 8081, debug 6070; and tollgate's /metrics
		ExposedPorts: map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}, "6070/tcp": {}, "9464/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":   "tollgate-rls",
			"org.opencontainers.image.source":  "https://github.com/tollgate-go/tollgate",
			"org.opencontainers.image.version": version,
		},
	}
	return mutate.ConfigFile(img, cf)
}

// sourceDateEpoch is every time in the image: SOURCE_DATE_EPOCH, or 0.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: not a number of seconds", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// compile builds the static binary from the tree (through go.work, so the
// tree's own modules are used) and returns it with its version.
func compile(root, arch string) ([]byte, string, error) {
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		return nil, "", fmt.Errorf("-C %s: no go.work there; run from the repository root", root)
	}
	dir, err := os.MkdirTemp("", "tollgate-image")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "tollgate-rls")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w -buildid=", "-o", out, pkgPath)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return nil, "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, "", err
	}
	return bin, treeVersion(root), nil
}

// treeVersion is versions.yaml's version: the release the tree is, or is
// being cut as.
func treeVersion(root string) string {
	b, err := os.ReadFile(filepath.Join(root, "versions.yaml"))
	if err != nil {
		return "devel"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "devel"
}

// filesystem is the image's one layer, as an uncompressed tar with fixed
// owners, modes and times, entries in a fixed order.
func filesystem(bin, ca []byte, epoch time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64, uid int) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode,
			Uid: uid, Gid: uid, ModTime: epoch, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, body []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode,
			Size: int64(len(body)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	steps := []func() error{
		func() error { return dir("bin", 0o755, 0) },
		func() error { return dir("etc", 0o755, 0) },
		func() error {
			return file("etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n"))
		},
		func() error {
			return file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"+
				"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"))
		},
		func() error { return dir("etc/ssl", 0o755, 0) },
		func() error { return dir("etc/ssl/certs", 0o755, 0) },
		func() error { return file(caPath, 0o644, ca) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir("home/nonroot", 0o700, nonrootID) },
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir("usr/local/bin", 0o755, 0) },
		func() error { return file(binPath, 0o755, bin) },
		func() error {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: linkPath,
				Linkname: "/" + binPath, Mode: 0o777, ModTime: epoch, Format: tar.FormatPAX})
		},
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() == 0 {
		return nil, errors.New("empty layer")
	}
	return buf.Bytes(), nil
}
