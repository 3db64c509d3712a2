#!/usr/bin/env bash
# The same test bed on kind, for a machine WITH Docker (KARMADAQUOTA_TESTBED=kind).
#
# NOTE: this cannot run on the CI machine (no Docker engine there) and has not been run in
# this repository's CI; the local backend (hack/local-up.sh) is what CI uses. Needs docker,
# kind and go on PATH. Writes the same kubeconfig layout as the local backend:
#   ${KARMADAQUOTA_HOME:-$HOME/.karmadaquota}/kubeconfig/{karmada-apiserver,<member>}.config
# and ${KARMADAQUOTA_HOME}/webhook-host: the address the kind clusters reach this host on
# (the e2e fixtures serve test webhooks there).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${HERE}/versions.env"

STATE="${KARMADAQUOTA_HOME:-$HOME/.karmadaquota}"
KC="${STATE}/kubeconfig"
WORK="${STATE}/kind"
BIN="${KARMADAQUOTA_CACHE:-$HOME/.cache/karmadaquota}/bin"
IFS=, read -r -a MEMBERS <<< "${KARMADAQUOTA_MEMBERS:-member1,member2,member3}"
IMAGE="kindest/node:${KUBERNETES_VERSION}"
KUBECTL="${BIN}/kubectl"; [[ -x "${KUBECTL}" ]] || KUBECTL=kubectl
mkdir -p "${KC}" "${WORK}" "${BIN}"

# karmadactl from the same Karmada release, through the Go module proxy.
[[ -x "${BIN}/karmadactl" ]] || GOBIN="${BIN}" go install "github.com/karmada-io/karmada/cmd/karmadactl@${KARMADA_VERSION}"

cluster() {  # cluster NAME: create the kind cluster NAME once
  kind get clusters 2>/dev/null | grep -qx "$1" || kind create cluster --name "$1" --image "${IMAGE}" --kubeconfig "${WORK}/$1.config" --wait 120s
  kind get kubeconfig --name "$1" > "${WORK}/$1.config"
}
internal_kubeconfig() {  # NAME -> a kubeconfig whose server is the node's IP on the kind network
  local ip; ip="$(docker inspect -f '{{.NetworkSettings.Networks.kind.IPAddress}}' "$1-control-plane")"
  kind get kubeconfig --name "$1" --internal | sed "s#https://$1-control-plane:6443#https://${ip}:6443#" > "${WORK}/$1.internal.config"
}

cluster karmada-host
for m in "${MEMBERS[@]}"; do cluster "${m}"; done

if [[ ! -f "${WORK}/karmada/karmada-apiserver.config" ]]; then
  host_ip="$(docker inspect -f '{{.NetworkSettings.Networks.kind.IPAddress}}' karmada-host-control-plane)"
  "${BIN}/karmadactl" init --kubeconfig "${WORK}/karmada-host.config" \
    --karmada-data "${WORK}/karmada" --karmada-pki "${WORK}/karmada/pki" \
    --etcd-storage-mode emptyDir --karmada-apiserver-advertise-address "${host_ip}" \
    --karmada-controller-manager-extra-args="--feature-gates=ResourceQuotaEstimate=true"
fi
cp "${WORK}/karmada/karmada-apiserver.config" "${KC}/karmada-apiserver.config"

for m in "${MEMBERS[@]}"; do
  cp "${WORK}/${m}.config" "${KC}/${m}.config"
  internal_kubeconfig "${m}"
  "${KUBECTL}" --kubeconfig "${KC}/karmada-apiserver.config" get cluster "${m}" >/dev/null 2>&1 ||
    "${BIN}/karmadactl" join "${m}" --kubeconfig "${KC}/karmada-apiserver.config" --cluster-kubeconfig "${WORK}/${m}.internal.config"
done
for m in "${MEMBERS[@]}"; do
  "${KUBECTL}" --kubeconfig "${KC}/karmada-apiserver.config" wait --for=condition=Ready "cluster/${m}" --timeout=300s
done

docker network inspect kind -f '{{(index .IPAM.Config 0).Gateway}}' > "${STATE}/webhook-host"
echo "kind test bed ready; kubeconfigs in ${KC}; run the e2e suite with KARMADAQUOTA_TESTBED=kind"
