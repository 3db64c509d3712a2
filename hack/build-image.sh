#!/usr/bin/env bash
# Build the karmadaquota container image locally, the image the rendered manifests run.
#
# No image registry is reachable here, so `python:3.11-slim` cannot be pulled: the base is a
# stand-in built from Debian's own packages with mmdebstrap (Debian bookworm, CPython 3.11 — the
# same Debian and CPython minor as python:3.11-slim), imported as ${BASE_IMAGE}. The Dockerfile
# takes the base as a build argument and pip gets the host's CA bundle (this machine reaches
# PyPI through a TLS-inspecting egress). On a machine with a registry, `docker build .` builds
# the same image from python:3.11-slim.
#
# Engine: rootful podman with runc (crun fails on this host's hybrid cgroups). Idempotent: the
# base is rebuilt only when its recipe changes, the image only when its inputs do (a content
# hash of the Dockerfile, pyproject.toml and the package is the image's tag suffix and label).
#
# Output: prints the image reference (${IMAGE}) on its last line.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "${HERE}/.." && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

BASE_IMAGE="localhost/karmadaquota-base:${DEBIAN_SUITE}"
# tagged with the package's version: the tag the manifests and the chart render
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "${REPO}/pyproject.toml")"
IMAGE="${KARMADAQUOTA_IMAGE:-localhost/karmadaquota:${VERSION}}"
START=$(date +%s)
log() { printf '[build-image %4ds] %s\n' "$(( $(date +%s) - START ))" "$*" >&2; }

ensure_tools() {
  local missing=()
  command -v podman >/dev/null || missing+=(podman)
  command -v runc >/dev/null || missing+=(runc)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  if ((${#missing[@]})); then
    log "installing ${missing[*]} from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
  fi
}

podman_() { podman --runtime runc "$@"; }

label() { podman_ image inspect --format "{{ index .Labels \"$2\" }}" "$1" 2>/dev/null || true; }

build_base() {
  # the recipe: what goes into the base; a change rebuilds it
  local packages="python3,python3-venv,ca-certificates,tzdata"
  local recipe="${DEBIAN_SUITE} minbase ${packages}"
  if [[ "$(label "${BASE_IMAGE}" io.karmadaquota.recipe)" == "${recipe}" ]]; then
    log "base ${BASE_IMAGE}: up to date"
    return
  fi
  log "base ${BASE_IMAGE}: mmdebstrap ${recipe}"
  local tar
  tar="$(mktemp --suffix=.tar)"
  mmdebstrap --quiet --variant=minbase --include="${packages}" \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    "${DEBIAN_SUITE}" "${tar}" >&2
  podman_ import --change "LABEL io.karmadaquota.recipe=\"${recipe}\"" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "${tar}" "${BASE_IMAGE}" >&2
  rm -f "${tar}"
}

inputs_hash() {
  cd "${REPO}"
  { cat Dockerfile pyproject.toml README.md LICENSE 2>/dev/null
    find karmadaquota -name '*.py' -print | LC_ALL=C sort | xargs cat
    echo "${BASE_IMAGE}"; } | sha256sum | cut -c1-16
}

build_image() {
  local hash
  hash="$(inputs_hash)"
  if [[ "$(label "${IMAGE}" io.karmadaquota.inputs)" == "${hash}" ]]; then
    log "image ${IMAGE}: up to date (${hash})"
    return
  fi
  log "image ${IMAGE}: building (${hash})"
  local ca=/etc/ssl/certs/ca-certificates.crt
  podman_ build --quiet --network host \
    --build-arg "BASE=${BASE_IMAGE}" \
    --build-arg "PIP_CERT=/run/host-ca.crt" \
    --volume "${ca}:/run/host-ca.crt:ro" \
    --label "io.karmadaquota.inputs=${hash}" \
    --tag "${IMAGE}" "${REPO}" >&2
}

ensure_tools
build_base
build_image
log "done"
echo "${IMAGE}"
