package config

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	if v := BuildVersion("tollgate-rls"); !strings.HasPrefix(v, "tollgate-rls ") || !strings.HasSuffix(v, runtime.Version()) {
		t.Errorf("version = %q", v)
	}
	core := &debug.Module{Path: "github.com/tollgate-go/tollgate/core", Version: "v0.3.0"}
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v0.3.0"}}, "tollgate-rls v0.3.0 go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Deps: []*debug.Module{{Path: "github.com/redis/go-redis/v9", Version: "v9.1.0"}, core},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-12-04T23:00:00Z"}}},
			"tollgate-rls (devel, tollgate modules v0.3.0) commit 0123456789ab+dirty (2026-12-04T23:00:00Z) go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0", Deps: []*debug.Module{{Path: core.Path, Version: "(devel)"}}}, "tollgate-rls (devel) go1.26.0"},
	} {
		if got := describeBuild("tollgate-rls", &tc.bi); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}
