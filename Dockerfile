# syntax=docker/dockerfile:1
# One image for everything: `lookaround worker` (the default), `lookaround train`, `lookaround
# topics`, `lookaround produce`, `lookaround replay-topic` and the other tools.
#
#   docker build -t lookaround .
#   docker run --rm lookaround --help
#
# Dependencies are pinned by constraints.txt (python -m deploy.constraints regenerates it).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: a virtual environment with the pinned dependencies and the package -------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# A compiler for lookaround's own compiled extensions (online/kernels.pyx, online/fastparse.pyx,
# streams/partitioner.pyx) and the rare dependency without a wheel; it stays in this stage.
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Dependencies first (cached until constraints.txt changes), exactly as pinned.
COPY constraints.txt ./
RUN pip install --no-deps -r constraints.txt
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY online ./online
COPY batch ./batch
COPY streams ./streams
RUN pip install --no-deps --constraint constraints.txt . \
    && pip check \
    && lookaround --help >/dev/null

# -- runtime: slim, no compiler, non-root ---------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="lookaround" \
      org.opencontainers.image.description="Tells a focused web crawler which pages to recrawl first." \
      org.opencontainers.image.licenses="Apache-2.0"
# libgomp: OpenMP runtime of FAISS and scikit-learn.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 lookaround \
    && useradd --system --uid 10001 --gid 10001 --home-dir /app --shell /usr/sbin/nologin lookaround \
    && mkdir -p /app /models /data \
    && chown lookaround:lookaround /app /models /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    LOOKAROUND_REGISTRY_DIR=/models
WORKDIR /app
USER 10001:10001
# The worker's /health and /metrics (LOOKAROUND_WEB_PORT).
EXPOSE 6066
# Healthy while the worker's /health answers 200 (503 or no answer: unhealthy). Services that
# run another command (topics, trainer) turn it off in docker-compose.yml.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('LOOKAROUND_WEB_PORT', '6066'), timeout=4)"]
ENTRYPOINT ["lookaround"]
CMD ["worker"]
