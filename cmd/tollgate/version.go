package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// version describes this build, from the build information Go records: the
// module version, or for a build from a work tree ("(devel)") the release
// its tollgate modules are required at (versions.yaml's, which every
// go.mod follows) when not replaced by the work tree's; the commit and its
// time when built from a repository (+dirty: with local changes); and the
// Go version.
func version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return describeBuild(name, bi)
}

// describeBuild is version's text for bi.
func describeBuild(name string, bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	if v == "(devel)" {
		for _, d := range bi.Deps {
			if strings.HasPrefix(d.Path, "github.com/tollgate-go/tollgate/") && d.Replace == nil && d.Version != "" && d.Version != "(devel)" {
				v = "(devel, tollgate modules " + d.Version + ")"
				break
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", name, v)
	s := map[string]string{}
	for _, kv := range bi.Settings {
		s[kv.Key] = kv.Value
	}
	if r := s["vcs.revision"]; r != "" {
		fmt.Fprintf(&b, " commit %s", r[:min(len(r), 12)])
		if s["vcs.modified"] == "true" {
			b.WriteString("+dirty")
		}
		if tm := s["vcs.time"]; tm != "" {
			fmt.Fprintf(&b, " (%s)", tm)
		}
	}
	fmt.Fprintf(&b, " %s", bi.GoVersion)
	return b.String()
}
