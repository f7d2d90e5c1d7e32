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

// TestImage builds the image from the repository, pushes it to an
// in-process registry on loopback, pulls it back, and runs its binary.
func TestImage(t *testing.T) {
	ctx := t.Context()
	version, err := readVersion(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// Others may commit while the binaries build: either HEAD is right.
	heads := []string{gitHead(t)}
	idx, err := build(ctx, buildOptions{Root: repoRoot, CACerts: defaultCACerts, Log: t.Output()})
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
	m, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var revision string
	var gotPlatforms []string
	var host v1.Image
	for _, desc := range m.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		p := desc.Platform.String()
		gotPlatforms = append(gotPlatforms, p)
		img, err := pulled.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
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
		if desc.Platform.OS == "linux" && desc.Platform.Architecture == runtime.GOARCH {
			host = img
		}
	}
	slices.Sort(gotPlatforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(gotPlatforms, want) {
		t.Errorf("platforms %q, want %q", gotPlatforms, want)
	}
	if !slices.ContainsFunc(heads, func(head string) bool { return revision == head || revision == head+"-dirty" }) {
		t.Errorf("revision label %q, want HEAD %q (or -dirty)", revision, heads)
	}

	if runtime.GOOS != "linux" || host == nil {
		t.Skipf("no image to run on %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	files := extract(t, host)
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
