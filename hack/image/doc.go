// Command image builds fleet-manager's container image without a Docker
// engine or a base image, and pushes it: `make image` and `make push`.
//
// image build cross-compiles the static binary (CGO_ENABLED=0, -trimpath,
// VERSION stamped with -ldflags) for linux/amd64 and linux/arm64 and
// assembles an OCI image index on an empty base: one layer with the
// binary, one with the CA certificates of the machine that builds it. The
// config runs the binary's run command as user 65532:65532, and carries the
// OCI source, revision and version labels, which are also the index's and
// each manifest's annotations. Layers and config have fixed timestamps, so
// the same binaries give the same digests. It writes an OCI layout
// (bin/image by default).
//
// image push pushes the index in that layout to a registry, with the
// credentials of the default keychain (docker login, credential helpers).
//
// Its test builds the host's image around a race build of the binary, as
// make test compiles everything with -race, and checks the static build's
// settings as a command (TestCompileCommand); make image compiles it.
//
// It is a module of its own, so that go-containerregistry stays out of the
// fleet-manager module.
package main
