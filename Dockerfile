# turngate container image.
#
#   docker build -t turngate:0.1.0 .
#   docker run --rm -p 8787:8787 turngate:0.1.0
#
# The builder stage makes a wheel of this checkout and installs it, with its runtime
# dependencies only, into a virtualenv at /opt/turngate. The final stage is python:3.11-slim
# with that virtualenv copied in: no compilers, no pip cache, no sources, no tests.
# Both stages use the same Debian release, so the virtualenv's interpreter path and the
# compiled wheels (orjson, hiredis, pydantic-core) match.

ARG PYTHON_VERSION=3.11
ARG DEBIAN_RELEASE=bookworm

FROM python:${PYTHON_VERSION}-${DEBIAN_RELEASE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# README.md* : the wheel's long description, when the checkout has one.
COPY pyproject.toml README.md* ./
COPY turngate ./turngate
RUN python -m venv /opt/turngate \
 && /opt/turngate/bin/pip install --upgrade pip \
 && /opt/turngate/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && /opt/turngate/bin/pip install /wheels/turngate-*.whl \
 && /opt/turngate/bin/pip uninstall --yes pip \
 && /opt/turngate/bin/turngate --version

FROM python:${PYTHON_VERSION}-slim-${DEBIAN_RELEASE} AS runtime
LABEL org.opencontainers.image.title="turngate" \
      org.opencontainers.image.description="A sidecar proxy that refuses invalid LLM message sequences before they are sent." \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 turngate \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/turngate \
      --no-create-home --shell /usr/sbin/nologin turngate \
 && install --directory --owner 10001 --group 10001 --mode 0750 /var/lib/turngate
COPY --from=builder /opt/turngate /opt/turngate
# TURNGATE_STATE puts the SQLite file on the volume; in Kubernetes the chart sets it (an
# emptyDir at the same path) and passes --host 127.0.0.1, replacing CMD.
ENV PATH=/opt/turngate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    TURNGATE_PORT=8787 \
    TURNGATE_STATE=sqlite:///var/lib/turngate/turngate.db
WORKDIR /var/lib/turngate
VOLUME ["/var/lib/turngate"]
USER 10001:10001
EXPOSE 8787
# No curl in slim: Python's urllib, with proxies from the environment ignored. It follows
# TURNGATE_PORT; set the port with -e TURNGATE_PORT=… rather than --port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request as u; u.build_opener(u.ProxyHandler({})).open('http://127.0.0.1:%s/healthz' % os.environ.get('TURNGATE_PORT', '8787'), timeout=2)"]
ENTRYPOINT ["turngate", "serve"]
# Inside a container, a published port needs a listener on every interface. The Helm chart
# replaces this with --host 127.0.0.1: in a pod only the app's containers reach turngate.
CMD ["--host", "0.0.0.0"]
