package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// version describes this build, from the build information Go records: the
// module version ("(devel)" for a build from a work tree), the commit and
// its time when built from a repository (+dirty: with local changes), and
// the Go version.
func version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
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
