#!/usr/bin/env bash
# `make release`: the image archive, the packaged chart, the plugin archives with their Krew
# manifest, the wheel and sdist, and SHA256SUMS, in dist/release/v<version> (hack/release.py).
#   hack/release.sh --repo OWNER/NAME [--out DIR] [--skip-image]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${HERE}/../.venv/bin/python" ]]; then PYTHON="${HERE}/../.venv/bin/python"; else PYTHON=python3; fi
fi
exec "${PYTHON}" "${HERE}/release.py" "$@"
