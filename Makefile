# karmadaquota — developer entry points. `make up` and `make test` are the two commands a
# fresh clone needs (README, CI): both create the project virtualenv `.venv/` and install the
# package with its test dependencies into it when missing, then build any missing binaries.
# PYTHON=/path/to/python uses that interpreter instead (its packages are then yours to install).
VENV := $(CURDIR)/.venv
export PYTHON ?= $(VENV)/bin/python
export KARMADAQUOTA_CACHE ?= $(HOME)/.cache/karmadaquota
export PIP_DISABLE_PIP_VERSION_CHECK ?= 1

.PHONY: install binaries helm lint typecheck unit e2e e2e-previous test up down crds bench release

# The venv is (re)installed when pyproject.toml changes; the stamp records the last install.
ifeq ($(PYTHON),$(VENV)/bin/python)
install: $(VENV)/.installed
else
install:
endif

$(VENV)/bin/python:
	python3 -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q --upgrade pip 'setuptools>=77'
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	touch $@

binaries: install
	bash hack/build-binaries.sh

# the chart's unit tests run the real helm: built when missing (a stamp check when present)
helm: install
	bash hack/build-binaries.sh helm

crds: install
	./hack/gen-crds

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck: install
	$(PYTHON) -m mypy

unit: install helm
	$(PYTHON) -m pytest -q tests

e2e: binaries
	$(PYTHON) -m pytest -q -m e2e e2e

# The version matrix: the smoke subset (tests marked `smoke`) on a bed running the previous
# Karmada minor pinned in hack/versions.env (KARMADA_PREVIOUS_VERSION); two release trials
# instead of ten keep it short (e2e/test_versions.py says what it checks).
e2e-previous: binaries
	KARMADAQUOTA_KARMADA_VERSION=previous KARMADAQUOTA_E2E_RELEASE_TRIALS=2 \
		$(PYTHON) -m pytest -q -p no:cacheprovider -m smoke e2e

# Everything CI checks: lint, types, unit tests, the e2e suite on the real test bed, and the
# smoke subset on the previous Karmada.
test: binaries lint typecheck
	$(PYTHON) -m pytest -q -p no:cacheprovider tests e2e
	$(MAKE) --no-print-directory e2e-previous

# A local Karmada (member1..3) with karmadaquota running on it and a sample quota.
# (hack/local-up.sh builds only the programs this bed runs.)
up: install
	bash hack/local-up.sh
	$(PYTHON) -m e2e.testbed.demo up

down: install
	$(PYTHON) -m e2e.testbed.demo down
	bash hack/local-down.sh

# Figures for docs/benchmarks.md (several minutes; run on a quiet machine).
bench: binaries
	$(PYTHON) -m bench.bench_recompute
	$(PYTHON) -m bench.bench_cost --rounds 3 --count 600 --deployments 100
	$(PYTHON) -m bench.bench_admission --rounds 3 --seconds 8
	$(PYTHON) -m bench.bench_wake --trials 10 --refused-for 60

# What a user installs, in dist/release/v<version>: the image as an OCI archive, the packaged
# chart, the plugin archives and their Krew manifest, wheel, sdist, SHA256SUMS (docs/install.md,
# "Release artifacts"). RELEASE_REPO is the GitHub OWNER/NAME the release is published at.
release: binaries
	bash hack/release.sh --repo "$(RELEASE_REPO)"
