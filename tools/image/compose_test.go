package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
)

// TestComposeFile loads examples/docker-compose.yml as `docker compose
// config` does (compose-go: the schema, interpolation, consistency), and
// checks each service's build names a Dockerfile that exists, where no
// Docker client with compose runs.
func TestComposeFile(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "examples", "docker-compose.yml")
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithName("tollgate-examples"),
		cli.WithWorkingDirectory(filepath.Dir(file)), cli.WithConsistency(true), cli.WithResolvedPaths(true))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var builds int
	for name, s := range p.Services {
		if s.Build == nil {
			continue
		}
		builds++
		df := s.Build.Dockerfile
		if !filepath.IsAbs(df) {
			df = filepath.Join(s.Build.Context, df)
		}
		if _, err := os.Stat(df); err != nil {
			t.Errorf("service %s: its Dockerfile: %v", name, err)
		}
	}
	if p.Services["rls"].Build == nil || builds < 2 {
		t.Errorf("%d services build an image; want the examples and rls", builds)
	}
}
