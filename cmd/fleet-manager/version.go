package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version is the release this binary is, stamped at build by make build and
// make image with -ldflags "-X main.version=$(cat VERSION)". Empty in a plain
// go build, which reports the module version from the build info instead.
var version string

// buildVersion is what `fleet-manager version` prints.
type buildVersion struct {
	Version string // the stamped version, else the module's, else "(devel)"
	Commit  string // vcs.revision, "-dirty" if the tree had changes; "unknown" without VCS stamping
	Go      string // the Go version and platform the binary was built for
}

// currentVersion returns this binary's version.
func currentVersion() buildVersion {
	info, _ := debug.ReadBuildInfo()
	return versionOf(version, info)
}

// versionOf returns the version of a binary stamped with stamped and built
// as info, which may be nil.
func versionOf(stamped string, info *debug.BuildInfo) buildVersion {
	v := buildVersion{
		Version: stamped,
		Commit:  "unknown",
		Go:      fmt.Sprintf("%s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
	}
	if info != nil {
		if v.Version == "" {
			v.Version = info.Main.Version
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		if revision := settings["vcs.revision"]; revision != "" {
			v.Commit = revision
			if settings["vcs.modified"] == "true" {
				v.Commit += "-dirty"
			}
		}
	}
	if v.Version == "" {
		v.Version = "(devel)"
	}
	return v
}

func (v buildVersion) String() string {
	return fmt.Sprintf("version: %s\ncommit: %s\ngo: %s\n", v.Version, v.Commit, v.Go)
}

// newVersionCommand returns the version command, which prints the
// binary's version, commit and Go version to stdout.
func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and the Go version (also --version)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := io.WriteString(cmd.OutOrStdout(), currentVersion().String())
			return err
		},
	}
}
