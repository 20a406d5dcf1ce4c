#!/usr/bin/env bash
# Build the real Kubernetes control plane that the tests marked `controlplane` run against
# (docs/controlplane.md): one binary, .gl/bin/glcluster, holding upstream etcd,
# kube-apiserver, kube-controller-manager and the KWOK controller, from the pinned Go module
# in e2e/cluster. Nothing is built when the binary is current: a stamp next to it records a
# hash of the module's files, this script and the Go version that built it.
#
# Usage: scripts/controlplane-build.sh [--force]
#   GO=/path/to/go        the Go toolchain (default: go on PATH, else /usr/local/go/bin/go)
#
# To move to another Kubernetes release, change k8s.io/kubernetes in e2e/cluster/go.mod and
# every k8s.io/* replace to the matching v0.X.Y (the release's own go.mod lists them, as
# ./staging replaces), pick the etcd and KWOK versions that release's go.mod and KWOK's
# go.mod name, then run `go mod tidy` in e2e/cluster and commit go.mod and go.sum.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$self")/.."

module=e2e/cluster
out=.gl/bin/glcluster
stamp=$out.stamp

go=${GO:-$(command -v go || true)}
[[ -z $go && -x /usr/local/go/bin/go ]] && go=/usr/local/go/bin/go
if [[ -z $go ]]; then
  echo "controlplane-build: no Go toolchain (go $(sed -n 's/^go //p' $module/go.mod) or newer" \
    "is needed; https://go.dev/dl). GLEANER_SKIP_CONTROLPLANE=1 skips these tests." >&2
  exit 1
fi

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' $module/go.mod)
minor=${k8s_version#v1.}
minor=${minor%%.*}
want=$(
  {
    "$go" version
    cat "$self" $module/go.mod $module/go.sum $module/*.go
  } | sha256sum | cut -d' ' -f1
)

if [[ ${1:-} != --force && -x $out && -f $stamp && $(cat $stamp) == "$want" ]]; then
  exit 0
fi

echo "controlplane-build: building $out (Kubernetes $k8s_version; a first build takes" \
  "many minutes, later ones reuse Go's build cache)"
mkdir -p "$(dirname $out)"
start=$(date +%s)
# -s -w: no symbol table or DWARF, which makes the link markedly faster and the binary
# smaller; the version variables are what upstream's release build stamps in.
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
# nice: the build may take every core for minutes; the machine is shared. -mod=readonly:
# go.sum must already pin everything. -buildvcs=false: the stamp above is the version.
(cd $module && nice -n 19 "$go" build -mod=readonly -buildvcs=false -ldflags "$ldflags" \
  -o "$OLDPWD/$out.tmp" .)
mv "$out.tmp" "$out"
echo "$want" > "$stamp"
echo "controlplane-build: built $out in $(($(date +%s) - start)) s"
