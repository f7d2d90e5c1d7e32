#!/usr/bin/env bash
# Builds the named upstream binaries (kube-apiserver, etcd, kubectl) from the
# Go module proxy into bin/, via the tools module in hack/tools. A binary is
# rebuilt only when it is missing or when hack/tools/go.mod or go.sum changed
# since it was built.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${root}/bin"
want="$(cat "${root}/hack/tools/go.mod" "${root}/hack/tools/go.sum" | sha256sum | cut -d' ' -f1)"

mkdir -p "${out}"
for cmd in "$@"; do
  stamp="${out}/.${cmd}.version"
  if [[ -x "${out}/${cmd}" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
    continue
  fi
  echo "envtest: building ${cmd} into ${out} (cold: several minutes)"
  (cd "${root}/hack/tools" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -tags selinux,notest,grpcnotrace -o "${out}/${cmd}" "./${cmd}")
  echo "${want}" > "${stamp}"
done
