# One image, two commands: `karmadaquota webhook …` and `karmadaquota controller …`.
# (Built on machines with a Docker engine; this repository's CI has none.)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY karmadaquota ./karmadaquota
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER 65532:65532
ENTRYPOINT ["karmadaquota"]
