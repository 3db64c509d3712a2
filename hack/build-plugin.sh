#!/usr/bin/env bash
# Bundle the kubectl plugin without the server stack: dist/kubectl-karmadaquota_<os>_<arch>.tar.gz
# (the Krew artifact of deploy/krew/karmadaquota.yaml). Options and the why: hack/build_plugin.py.
#   hack/build-plugin.sh                                           # this machine, this Python
#   hack/build-plugin.sh --target linux/arm64 --python 3.11 --python 3.12 --python 3.13
# PYTHON picks the interpreter whose installed packages are bundled (default: .venv, else python3).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "${HERE}/../.venv/bin/python" ]]; then PYTHON="${HERE}/../.venv/bin/python"; else PYTHON=python3; fi
fi
exec "${PYTHON}" "${HERE}/build_plugin.py" "$@"
