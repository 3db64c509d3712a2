#!/usr/bin/env bash
# Start (or reuse) the local test bed: a Karmada control plane + member clusters as processes
# on 127.0.0.1, built from source by hack/build-binaries.sh (a no-op when up to date).
#
# Idempotent: on a healthy bed with the same members it returns at once. Kubeconfigs go to
# ${KARMADAQUOTA_HOME:-$HOME/.karmadaquota}/kubeconfig/{karmada-apiserver,<member>}.config.
# Extra arguments go to `python -m e2e.testbed up` (e.g. --members member1,member2).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "${HERE}/.."
if [[ "${KARMADAQUOTA_TESTBED:-local}" == "kind" ]]; then
  exec "${HERE}/kind-up.sh"
fi
# only this bed's programs (KARMADAQUOTA_KARMADA_VERSION chooses the Karmada): not the version
# matrix's other Karmada, helm or promql-check, which `make binaries` builds for CI
"${HERE}/build-binaries.sh" bed
exec "${PYTHON:-python3}" -m e2e.testbed up "$@"
