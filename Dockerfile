# syntax=docker/dockerfile:1
# The one Gleaner image: `gleaner operator` and `gleaner agent` (entry point `gleaner`), with
# the GPU shim at /opt/gleaner/lib/libgleaner_shim.so, which the agent copies to the node. The
# native compute gate the agent loads comes inside the gleaner wheel (compiled when the wheel
# is built, hence gcc and make in the build stage).
#   docker build -t gleaner/gleaner:0.1.0 .
# Pushing it, and building the same image without a Docker daemon (make image): docs/image.md.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the C shim (gcc + make) and wheels of Gleaner (with its native compute gate) --
FROM ${PYTHON_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src

COPY runtime-agent/shim runtime-agent/shim
RUN make -C runtime-agent/shim \
 && shim="$(find runtime-agent/shim -name libgleaner_shim.so -type f | head -n 1)" \
 && test -n "$shim" \
 && install -D -m 0755 "$shim" /out/lib/libgleaner_shim.so

COPY pyproject.toml README.md hatch_build.py ./
COPY api api
COPY clients clients
COPY protocol protocol
COPY perfmodel perfmodel
COPY scheduler scheduler
COPY operator operator
COPY cli cli
COPY dashboard dashboard
COPY runtime-agent runtime-agent
COPY simulator simulator
COPY batch batch
RUN pip wheel --no-cache-dir --wheel-dir /out/wheels ./protocol .

# ---- runtime: the wheels installed into a slim Python, run as a non-root user ------------
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="gleaner" \
      org.opencontainers.image.description="Gleaner operator and runtime agent" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 65532 gleaner \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gleaner
COPY --from=build /out/wheels /tmp/wheels
RUN pip install --no-cache-dir --no-index --find-links /tmp/wheels gleaner \
 && rm -rf /tmp/wheels
COPY --from=build /out/lib/libgleaner_shim.so /opt/gleaner/lib/libgleaner_shim.so
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# 8080: operator HTTP (dashboard, /api, /metrics, probes); 9464: agent /metrics and /healthz.
EXPOSE 8080 9464
ENTRYPOINT ["gleaner"]
CMD ["--help"]
