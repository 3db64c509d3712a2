#!/usr/bin/env bash
# Mint the webhook's serving certificate and register its CA with karmada-apiserver.
#
#   hack/gen-webhook-certs.sh [OUT_DIR]
#     HOST_KUBECONFIG=...     cluster hosting Karmada: gets Secret karmada-system/karmadaquota-webhook-cert
#     KARMADA_KUBECONFIG=...  karmada-apiserver: gets webhook/karmada/ with the caBundle filled in
#
# Without the kubeconfig variables it only writes ca.crt, tls.crt and tls.key into OUT_DIR.
# The certificate is valid for 365 days; rerun to rotate (the webhook reloads changed files).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${1:-$(mktemp -d)}"
SERVICE="${SERVICE:-karmadaquota-webhook}"
NAMESPACE="${NAMESPACE:-karmada-system}"
mkdir -p "${OUT}"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 -subj "/CN=karmadaquota-webhook-ca" \
  -keyout "${OUT}/ca.key" -out "${OUT}/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=${SERVICE}.${NAMESPACE}.svc" \
  -keyout "${OUT}/tls.key" -out "${OUT}/tls.csr" 2>/dev/null
printf 'subjectAltName=DNS:%s,DNS:%s.%s,DNS:%s.%s.svc,DNS:%s.%s.svc.cluster.local\nextendedKeyUsage=serverAuth\n' \
  "${SERVICE}" "${SERVICE}" "${NAMESPACE}" "${SERVICE}" "${NAMESPACE}" "${SERVICE}" "${NAMESPACE}" \
  > "${OUT}/ext.cnf"
openssl x509 -req -in "${OUT}/tls.csr" -CA "${OUT}/ca.crt" -CAkey "${OUT}/ca.key" \
  -CAcreateserial -days 365 -extfile "${OUT}/ext.cnf" -out "${OUT}/tls.crt" 2>/dev/null
rm -f "${OUT}/tls.csr" "${OUT}/ext.cnf" "${OUT}/ca.srl"
echo "wrote ${OUT}/ca.crt ${OUT}/tls.crt ${OUT}/tls.key"

if [[ -n "${HOST_KUBECONFIG:-}" ]]; then
  kubectl --kubeconfig "${HOST_KUBECONFIG}" -n "${NAMESPACE}" create secret tls \
    karmadaquota-webhook-cert --cert "${OUT}/tls.crt" --key "${OUT}/tls.key" \
    --dry-run=client -o yaml | kubectl --kubeconfig "${HOST_KUBECONFIG}" apply -f -
fi
if [[ -n "${KARMADA_KUBECONFIG:-}" ]]; then
  CA_BUNDLE="$(base64 -w0 < "${OUT}/ca.crt")"
  kubectl kustomize webhook/karmada | sed "s|caBundle: \"\"|caBundle: ${CA_BUNDLE}|" \
    | kubectl --kubeconfig "${KARMADA_KUBECONFIG}" apply -f -
fi
