package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	source     = "https://github.com/fleetkube/fleet-manager"
	binaryPath = "/fleet-manager"
	certsPath  = "/etc/ssl/certs/ca-certificates.crt"
	// user is distroless's nonroot; the Deployment's runAsUser matches it.
	user = "65532:65532"
)

// epoch stamps every layer entry, history entry and config, so that the
// same binaries give the same digests.
var epoch = time.Unix(0, 0).UTC()

// assemble returns the OCI image index of binaries, one image per
// platform, on an empty base with certs as the CA bundle. All binaries
// must come from the same revision.
func assemble(binaries []platformBinary, certs []byte, version string) (v1.ImageIndex, error) {
	if len(binaries) == 0 {
		return nil, fmt.Errorf("no binaries to put in the image")
	}
	revision := binaries[0].revision
	for _, b := range binaries[1:] {
		if b.revision != revision {
			return nil, fmt.Errorf("the binaries come from %s and %s: the tree changed during the build, run it again", revision, b.revision)
		}
	}
	labels := map[string]string{
		"org.opencontainers.image.source":   source,
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.version":  version,
	}
	certsLayer, err := layer(
		tarEntry{name: "etc/", mode: 0o755},
		tarEntry{name: "etc/ssl/", mode: 0o755},
		tarEntry{name: "etc/ssl/certs/", mode: 0o755},
		tarEntry{name: certsPath[1:], mode: 0o644, data: certs},
	)
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, b := range binaries {
		binaryLayer, err := layer(tarEntry{name: binaryPath[1:], mode: 0o755, data: b.data})
		if err != nil {
			return nil, err
		}
		img, err := mutate.Append(base,
			mutate.Addendum{Layer: binaryLayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "make image: " + binaryPath}},
			mutate.Addendum{Layer: certsLayer, History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "make image: " + certsPath}},
		)
		if err != nil {
			return nil, err
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cfg = cfg.DeepCopy()
		cfg.Created = v1.Time{Time: epoch}
		cfg.OS, cfg.Architecture = b.platform.OS, b.platform.Architecture
		cfg.Config.Entrypoint = []string{binaryPath}
		cfg.Config.Cmd = []string{"run"}
		cfg.Config.User = user
		cfg.Config.WorkingDir = "/"
		cfg.Config.Labels = labels
		if img, err = mutate.ConfigFile(img, cfg); err != nil {
			return nil, err
		}
		platform := b.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        mutate.Annotations(img, labels).(v1.Image),
			Descriptor: v1.Descriptor{Platform: &platform},
		})
	}
	return mutate.Annotations(idx, labels).(v1.ImageIndex), nil
}

// tarEntry is a file in a layer, or a directory if its name ends in "/".
type tarEntry struct {
	name string
	mode int64
	data []byte
}

// layer returns an OCI layer of entries, owned by root and dated epoch.
func layer(entries ...tarEntry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if e.name[len(e.name)-1] == '/' {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}

// writeLayout replaces dir with an OCI layout holding idx.
func writeLayout(dir string, idx v1.ImageIndex) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx)
}

// readLayout returns the image index writeLayout wrote in dir.
func readLayout(dir string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the image (run make image first): %w", err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) != 1 || m.Manifests[0].MediaType != types.OCIImageIndex {
		return nil, fmt.Errorf("%s holds %d manifests, want one image index", dir, len(m.Manifests))
	}
	return root.ImageIndex(m.Manifests[0].Digest)
}

// push pushes the image index in the layout dir to ref, and returns the
// reference by digest it pushed.
func push(ctx context.Context, dir, ref string) (name.Digest, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return name.Digest{}, err
	}
	idx, err := readLayout(dir)
	if err != nil {
		return name.Digest{}, err
	}
	digest, err := idx.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", tag, err)
	}
	return tag.Context().Digest(digest.String()), nil
}
