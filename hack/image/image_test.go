package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// repoRoot is the fleet-manager repository, seen from this package.
const repoRoot = "../.."

// TestImage builds the image from the repository for the host's platform,
// pushes it to an in-process registry on loopback, pulls it back, and runs
// its binary. Only the host's: each platform costs a build of the whole
// binary from a cold cache, and the platforms differ only in GOARCH, which
// TestEveryPlatformBuilds and TestAssembleEveryPlatform cover.
func TestImage(t *testing.T) {
	ctx := t.Context()
	version, err := readVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	host := v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if !slices.ContainsFunc(platforms, host.Equals) {
		host = platforms[0]
	}
	// Others may commit while the binary builds: either HEAD is right.
	heads := []string{gitHead(t)}
	// Built as the test is (with -race under make test), so the build
	// links packages go test compiled; TestCompileCommand checks the
	// image's static build, and make image runs it.
	race := raceEnabled && host.Architecture == runtime.GOARCH && runtime.GOOS == "linux"
	idx, err := build(ctx, buildOptions{Root: repoRoot, CACerts: defaultCACerts, Log: t.Output(), Platforms: []v1.Platform{host}, Race: race})
	if err != nil {
		t.Fatal(err)
	}
	heads = append(heads, gitHead(t))

	dir := filepath.Join(t.TempDir(), "image")
	if err := writeLayout(dir, idx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/fleetkube/fleet-manager:" + version
	pushed, err := push(ctx, dir, ref)
	if err != nil {
		t.Fatal(err)
	}

	tag, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Index(tag, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	digest, err := pulled.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if digest.String() != pushed.DigestStr() {
		t.Errorf("pulled index %s, pushed %s", digest, pushed.DigestStr())
	}
	revision, images := checkIndex(t, pulled, version, []v1.Platform{host})
	if !slices.ContainsFunc(heads, func(head string) bool { return revision == head || revision == head+"-dirty" }) {
		t.Errorf("revision label %q, want HEAD %q (or -dirty)", revision, heads)
	}

	img := images[host.String()]
	if runtime.GOOS != "linux" || host.Architecture != runtime.GOARCH || img == nil {
		t.Skipf("no image to run on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	files := extract(t, img)
	binary := files["fleet-manager"]
	if binary == nil || binary.Mode&0o111 == 0 || binary.Uid != 0 {
		t.Fatalf("no root-owned executable /fleet-manager in the image: %+v", binary)
	}
	if certs := files["etc/ssl/certs/ca-certificates.crt"]; certs == nil || !bytes.Contains(certs.data, []byte("BEGIN CERTIFICATE")) {
		t.Error("no CA certificates at /etc/ssl/certs/ca-certificates.crt")
	}
	path := filepath.Join(t.TempDir(), "fleet-manager")
	if err := os.WriteFile(path, binary.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, path, "version").Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			t.Fatalf("fleet-manager version: %v\n%s", err, exitErr.Stderr)
		}
		t.Fatalf("fleet-manager version: %v", err)
	}
	if !strings.Contains(string(out), "version: "+version+"\n") || !strings.Contains(string(out), "commit: "+revision+"\n") {
		t.Errorf("fleet-manager version printed:\n%s\nwant version %s and commit %s", out, version, revision)
	}
}

// TestCompileCommand checks the build of the image's binary: static
// (CGO_ENABLED=0), without the builder's paths, stamped with the version
// and the commit, for the platform asked; and that a test's race build
// differs from it only in the race detector, cgo and the paths.
func TestCompileCommand(t *testing.T) {
	p := v1.Platform{OS: "linux", Architecture: "arm64"}
	image := compileCommand(t.Context(), "/repo", "v1.2.3", p, "/out/fleet-manager", false).cmd
	want := []string{"go", "build", "-trimpath", "-buildvcs=true", "-ldflags", "-s -w -X main.version=v1.2.3", "-o", "/out/fleet-manager", "./cmd/fleet-manager"}
	if !slices.Equal(image.Args, want) || image.Dir != "/repo" {
		t.Errorf("image build: %q in %s, want %q in /repo", image.Args, image.Dir, want)
	}
	env := image.Env[len(image.Env)-3:]
	if wantEnv := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}; !slices.Equal(env, wantEnv) {
		t.Errorf("image build's environment ends %q, want %q", env, wantEnv)
	}
	race := compileCommand(t.Context(), "/repo", "v1.2.3", p, "/out/fleet-manager", true).cmd
	want[2] = "-race"
	if !slices.Equal(race.Args, want) || slices.Contains(race.Env, "CGO_ENABLED=0") {
		t.Errorf("race build: %q, CGO_ENABLED=0 %t; want %q with cgo", race.Args, slices.Contains(race.Env, "CGO_ENABLED=0"), want)
	}
}

// TestEveryPlatformBuilds checks that fleet-manager's packages, with
// their dependencies, resolve for every platform of the image under the
// image's build settings: no package's files are all excluded by build
// constraints (say, an amd64-only file, or cgo with CGO_ENABLED=0). It
// does not compile them: make image does, TestImage for the host.
func TestEveryPlatformBuilds(t *testing.T) {
	for _, p := range platforms {
		cmd := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", "./cmd/fleet-manager")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
		out, err := cmd.Output()
		if err != nil {
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				t.Errorf("%s: go list: %v\n%s", p, err, exitErr.Stderr)
				continue
			}
			t.Fatalf("%s: go list: %v", p, err)
		}
		if !slices.Contains(strings.Fields(string(out)), "github.com/fleetkube/fleet-manager/cmd/fleet-manager") {
			t.Errorf("%s: go list does not list cmd/fleet-manager:\n%s", p, out)
		}
	}
}

// TestAssembleEveryPlatform checks the index of binaries for every
// platform of the image, as TestImage checks the host's.
func TestAssembleEveryPlatform(t *testing.T) {
	var binaries []platformBinary
	for _, p := range platforms {
		binaries = append(binaries, platformBinary{platform: p, revision: "0d059ab8", data: []byte(p.Architecture + " binary")})
	}
	idx, err := assemble(binaries, []byte("certs"), "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	want := []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}
	revision, images := checkIndex(t, idx, "v0.1.0", want)
	if revision != "0d059ab8" {
		t.Errorf("revision label %q, want the binaries' 0d059ab8", revision)
	}
	for _, b := range binaries {
		img := images[b.platform.String()]
		if img == nil {
			continue // checkIndex said so
		}
		if got := extract(t, img)["fleet-manager"]; got == nil || !bytes.Equal(got.data, b.data) {
			t.Errorf("%s: /fleet-manager is not the %s binary", b.platform, b.platform)
		}
	}
}

// checkIndex checks that idx holds one image for each of want, each
// configured to run /fleet-manager run as 65532:65532 and labelled, and
// annotated alike, with its source, version and one revision. It returns
// that revision and the images by platform.
func checkIndex(t *testing.T, idx v1.ImageIndex, version string, want []v1.Platform) (string, map[string]v1.Image) {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var revision string
	var gotPlatforms []string
	images := map[string]v1.Image{}
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		p := desc.Platform.String()
		gotPlatforms = append(gotPlatforms, p)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		images[p] = img
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Platform().String(); got != p {
			t.Errorf("%s: config is for %s", p, got)
		}
		c := cfg.Config
		if !slices.Equal(c.Entrypoint, []string{"/fleet-manager"}) || !slices.Equal(c.Cmd, []string{"run"}) {
			t.Errorf("%s: entrypoint %q, cmd %q, want [/fleet-manager] [run]", p, c.Entrypoint, c.Cmd)
		}
		if c.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", p, c.User)
		}
		if revision != "" && c.Labels["org.opencontainers.image.revision"] != revision {
			t.Errorf("%s: revision label %q, another image's is %q", p, c.Labels["org.opencontainers.image.revision"], revision)
		}
		revision = c.Labels["org.opencontainers.image.revision"]
		wantLabels := map[string]string{
			"org.opencontainers.image.source":  "https://github.com/fleetkube/fleet-manager",
			"org.opencontainers.image.version": version,
		}
		manifest, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range wantLabels {
			if c.Labels[k] != v || manifest.Annotations[k] != v || m.Annotations[k] != v {
				t.Errorf("%s: %s is %q as a label, %q as a manifest annotation, %q as an index annotation; want %q",
					p, k, c.Labels[k], manifest.Annotations[k], m.Annotations[k], v)
			}
		}
		if manifest.Annotations["org.opencontainers.image.revision"] != revision || m.Annotations["org.opencontainers.image.revision"] != revision {
			t.Errorf("%s: the revision annotations %q (manifest) and %q (index) differ from the label %q",
				p, manifest.Annotations["org.opencontainers.image.revision"], m.Annotations["org.opencontainers.image.revision"], revision)
		}
	}
	var wantPlatforms []string
	for _, p := range want {
		wantPlatforms = append(wantPlatforms, p.String())
	}
	slices.Sort(gotPlatforms)
	slices.Sort(wantPlatforms)
	if !slices.Equal(gotPlatforms, wantPlatforms) {
		t.Errorf("platforms %q, want %q", gotPlatforms, wantPlatforms)
	}
	return revision, images
}

// TestAssembleIsReproducible checks that the same binaries give the same
// index digest.
func TestAssembleIsReproducible(t *testing.T) {
	binaries := []platformBinary{
		{platform: platforms[0], revision: "0d059ab8", data: []byte("amd64 binary")},
		{platform: platforms[1], revision: "0d059ab8", data: []byte("arm64 binary")},
	}
	var digests []v1.Hash
	for range 2 {
		idx, err := assemble(binaries, []byte("certs"), "v0.1.0")
		if err != nil {
			t.Fatal(err)
		}
		d, err := idx.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	if digests[0] != digests[1] {
		t.Errorf("the same binaries gave indexes %s and %s", digests[0], digests[1])
	}

	binaries[1].revision += "-dirty"
	if _, err := assemble(binaries, []byte("certs"), "v0.1.0"); err == nil {
		t.Error("assemble accepted binaries from two revisions")
	}
}

type extractedFile struct {
	*tar.Header
	data []byte
}

// extract returns the files of img's flattened filesystem by name.
func extract(t *testing.T, img v1.Image) map[string]*extractedFile {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]*extractedFile{}
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = &extractedFile{Header: hdr, data: data}
	}
}

// gitHead returns the repository's HEAD commit.
func gitHead(t *testing.T) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "git", "rev-parse", "HEAD")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	return strings.TrimSpace(string(out))
}
