#!/usr/bin/env bash
# Stop every process of the local test bed (found through its state file), from any shell.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "${HERE}/.."
exec "${PYTHON:-python3}" -m e2e.testbed down "$@"
