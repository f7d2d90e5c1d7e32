#!/usr/bin/env bash
# Builds controller-gen from the Go module proxy into bin/, via its own tools
# module in hack/controller-gen (kept apart from hack/tools, whose
# k8s.io/kubernetes pins must not move). It is rebuilt only when it is
# missing or when hack/controller-gen/go.mod or go.sum changed since it was
# built. With arguments, it then runs controller-gen with them from the
# repository root, e.g.
#
#   hack/controller-gen.sh object paths=./api/...
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
out="${root}/bin"
bin="${out}/controller-gen"
stamp="${out}/.controller-gen.version"
want="$(cat "${root}/hack/controller-gen/go.mod" "${root}/hack/controller-gen/go.sum" | sha256sum | cut -d' ' -f1)"

mkdir -p "${out}"
if [[ ! -x "${bin}" || ! -f "${stamp}" || "$(cat "${stamp}")" != "${want}" ]]; then
  echo "controller-gen: building into ${out}" >&2
  (cd "${root}/hack/controller-gen" && CGO_ENABLED=0 go build -trimpath -o "${bin}" sigs.k8s.io/controller-tools/cmd/controller-gen)
  echo "${want}" > "${stamp}"
fi

if [[ $# -gt 0 ]]; then
  cd "${root}"
  exec "${bin}" "$@"
fi
