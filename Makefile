# karmadaquota — developer entry points. `make test` is the one test command (README, CI).
PYTHON ?= python3
export KARMADAQUOTA_CACHE ?= $(HOME)/.cache/karmadaquota

.PHONY: install binaries lint typecheck unit e2e test up down crds bench

install:
	$(PYTHON) -m pip install -q -e '.[test]'

binaries:
	bash hack/build-binaries.sh

crds:
	./hack/gen-crds

lint:
	ruff check .
	ruff format --check .

typecheck:
	mypy

unit:
	$(PYTHON) -m pytest -q tests

e2e: binaries
	$(PYTHON) -m pytest -q -m e2e e2e

# Everything CI checks: lint, types, unit tests and the e2e suite on the real test bed.
test: binaries lint typecheck
	$(PYTHON) -m pytest -q -p no:cacheprovider tests e2e

# A local Karmada (member1..3) with karmadaquota running on it and a sample quota.
up: binaries
	bash hack/local-up.sh
	$(PYTHON) -m e2e.testbed.demo up

down:
	$(PYTHON) -m e2e.testbed.demo down
	bash hack/local-down.sh

# Figures for docs/benchmarks.md (several minutes; run on a quiet machine).
bench: binaries
	$(PYTHON) -m bench.bench_recompute
	$(PYTHON) -m bench.bench_admission --rounds 3 --seconds 8
