#!/usr/bin/env bash
# Builds Prometheus's promtool, at the version pinned here, from the Go module
# proxy into bin/, for the alerts' rule tests (hack/manifests). It is rebuilt
# only when missing or when the version changed since it was built.
set -euo pipefail

# Prometheus v3.16.0's Go module version.
version=v0.316.0

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${root}/bin"
stamp="${out}/.promtool.version"

if [[ -x "${out}/promtool" && -f "${stamp}" && "$(cat "${stamp}")" == "${version}" ]]; then
  exit 0
fi
# remove_all_sd leaves out the service discovery plugins, which rule tests
# do not use, and with them the cloud providers' SDKs.
echo "promtool: building ${version} into ${out} (cold: several minutes)"
mkdir -p "${out}"
GOBIN="${out}" CGO_ENABLED=0 go install -trimpath -ldflags="-s -w" -tags remove_all_sd "github.com/prometheus/prometheus/cmd/promtool@${version}"
echo "${version}" > "${stamp}"
