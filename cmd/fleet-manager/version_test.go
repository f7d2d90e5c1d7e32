package main

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/fleetkube/fleet-manager/internal/cli"
)

func TestVersionOf(t *testing.T) {
	built := func(mainVersion string, settings ...string) *debug.BuildInfo {
		info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/fleetkube/fleet-manager", Version: mainVersion}}
		for i := 0; i < len(settings); i += 2 {
			info.Settings = append(info.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return info
	}
	cases := map[string]struct {
		stamped     string
		info        *debug.BuildInfo
		wantVersion string
		wantCommit  string
	}{
		"stamped, clean tree": {
			stamped: "v0.1.0", info: built("(devel)", "vcs.revision", "0d059ab8", "vcs.modified", "false"),
			wantVersion: "v0.1.0", wantCommit: "0d059ab8",
		},
		"stamped, dirty tree": {
			stamped: "v0.1.0", info: built("(devel)", "vcs.revision", "0d059ab8", "vcs.modified", "true"),
			wantVersion: "v0.1.0", wantCommit: "0d059ab8-dirty",
		},
		"unstamped, in the module": {
			info:        built("(devel)"),
			wantVersion: "(devel)", wantCommit: "unknown",
		},
		"unstamped, as a dependency": {
			info:        built("v0.2.0"),
			wantVersion: "v0.2.0", wantCommit: "unknown",
		},
		"unstamped, no module version": {
			info:        built(""),
			wantVersion: "(devel)", wantCommit: "unknown",
		},
		"no build info": {
			wantVersion: "(devel)", wantCommit: "unknown",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			v := versionOf(tc.stamped, tc.info)
			if v.Version != tc.wantVersion || v.Commit != tc.wantCommit {
				t.Errorf("versionOf: version %q, commit %q; want %q, %q", v.Version, v.Commit, tc.wantVersion, tc.wantCommit)
			}
			if !strings.HasPrefix(v.Go, "go") {
				t.Errorf("Go = %q, want the Go version", v.Go)
			}
		})
	}
}

func TestVersionCommand(t *testing.T) {
	want := currentVersion().String()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var stdout, stderr bytes.Buffer
		if code := execute(args, &stdout, &stderr); code != cli.ExitOK {
			t.Errorf("%q: exit code %d, want %d; stderr:\n%s", args, code, cli.ExitOK, stderr.String())
		}
		if stdout.String() != want {
			t.Errorf("%q printed %q, want %q", args, stdout.String(), want)
		}
	}
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"version", "extra"}, &stdout, &stderr); code != cli.ExitUsage {
		t.Errorf("version extra: exit code %d, want %d", code, cli.ExitUsage)
	}
}
