# One image, two commands: `karmadaquota webhook …` and `karmadaquota controller …`.
# BASE defaults to python:3.11-slim; hack/build-image.sh builds a stand-in from Debian's
# packages (no registry is reachable on the project's CI) and passes it here, with the host's
# CA bundle for pip as PIP_CERT. The app lives in a virtualenv at /opt/karmadaquota; the image
# runs as 65532:65532, a uid with no passwd entry, as the manifests declare. uvloop is included:
# `karmadaquota webhook --event-loop=uvloop` works in the image.
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG PIP_CERT=""
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY karmadaquota ./karmadaquota
RUN python3 -m venv /opt/karmadaquota \
 && if [ -z "$PIP_CERT" ]; then unset PIP_CERT; else export PIP_CERT; fi \
 && /opt/karmadaquota/bin/pip install --no-cache-dir --disable-pip-version-check -q ".[uvloop]" \
 && /opt/karmadaquota/bin/pip uninstall -y -q pip setuptools

FROM ${BASE}
COPY --from=build /opt/karmadaquota /opt/karmadaquota
ENV PATH=/opt/karmadaquota/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["karmadaquota"]
