package config

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// BuildVersion describes the build of the running program, for its
// --version: program, then the module version, or for a build from a work
// tree ("(devel)") the release its tollgate modules are required at when
// the work tree does not replace them; the commit and its time when built
// from a repository (+dirty: with local changes); and the Go version.
func BuildVersion(program string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return program + " (no build information)"
	}
	return describeBuild(program, bi)
}

// describeBuild is BuildVersion's text for bi.
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
