package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// defaultCACerts is where Debian, Ubuntu and Alpine keep the CA bundle.
const defaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// platforms are the platforms the image is built for.
var platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

// semver matches the release VERSION names.
var semver = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)

type buildOptions struct {
	Root      string        // the repository: its VERSION file and ./cmd/fleet-manager
	CACerts   string        // the CA bundle put in the image
	Log       io.Writer     // progress; may be nil
	Platforms []v1.Platform // the platforms to build for; nil means platforms, every one
	// Race builds the host's binary with the race detector, as go test
	// -race builds, for a test: it then links the packages its own build
	// compiled rather than compiling every one again static (make test
	// would compile the Kubernetes libraries twice). Never for an image.
	Race bool
}

// build cross-compiles fleet-manager for each platform and returns the
// image index of those binaries. The Go build cache makes a rebuild of an
// unchanged tree cost only the links.
func build(ctx context.Context, opts buildOptions) (v1.ImageIndex, error) {
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	version, err := readVersion(opts.Root)
	if err != nil {
		return nil, err
	}
	certs, err := os.ReadFile(opts.CACerts)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificates for the image (install the ca-certificates package, or pass -ca-certs): %w", err)
	}
	tmp, err := os.MkdirTemp("", "fleet-manager-image-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)

	targets := opts.Platforms
	if targets == nil {
		targets = platforms
	}
	binaries := make([]platformBinary, 0, len(targets))
	for _, p := range targets {
		logf("building fleet-manager %s for %s", version, p)
		path := filepath.Join(tmp, p.OS+"-"+p.Architecture, "fleet-manager")
		if err := compileCommand(ctx, opts.Root, version, p, path, opts.Race).run(); err != nil {
			return nil, err
		}
		b, err := readBinary(p, path)
		if err != nil {
			return nil, err
		}
		binaries = append(binaries, b)
	}
	return assemble(binaries, certs, version)
}

// readVersion returns the release in root's VERSION file.
func readVersion(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return "", err
	}
	version := strings.TrimSpace(string(b))
	if !semver.MatchString(version) {
		return "", fmt.Errorf("VERSION holds %q, want a version such as v0.1.0", version)
	}
	return version, nil
}

// compileCommand is the build of root's fleet-manager for p into out:
// static, without the builder's paths, stamped with version and with the
// commit; with race, the race detector's build for a test instead (cgo,
// the builder's paths).
func compileCommand(ctx context.Context, root, version string, p v1.Platform, out string, race bool) compilation {
	args := []string{"build", "-trimpath", "-buildvcs=true", "-ldflags", "-s -w -X main.version=" + version, "-o", out, "./cmd/fleet-manager"}
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture}
	if race {
		args = slices.Replace(args, 1, 2, "-race")
		env = env[1:]
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	return compilation{cmd: cmd, platform: p}
}

// compilation is one go build of fleet-manager.
type compilation struct {
	cmd      *exec.Cmd
	platform v1.Platform
}

// run runs the build, its output in the error if it fails.
func (c compilation) run() error {
	var output bytes.Buffer
	c.cmd.Stdout, c.cmd.Stderr = &output, &output
	if err := c.cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", c.platform, err, output.Bytes())
	}
	return nil
}

// platformBinary is a fleet-manager binary built for platform from revision.
type platformBinary struct {
	platform v1.Platform
	revision string // vcs.revision, with "-dirty" if the tree had changes
	data     []byte
}

// readBinary reads the binary at path, built for p, and the revision it was
// built from.
func readBinary(p v1.Platform, path string) (platformBinary, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return platformBinary{}, err
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	b := platformBinary{platform: p, revision: settings["vcs.revision"]}
	if b.revision == "" {
		return platformBinary{}, fmt.Errorf("the %s binary has no vcs.revision: build from a git checkout", p)
	}
	if settings["vcs.modified"] == "true" {
		b.revision += "-dirty"
	}
	b.data, err = os.ReadFile(path)
	return b, err
}
