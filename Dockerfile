# toolpool worker image: `docker compose up --scale worker=3` (see docker-compose.yml).
# Configured by TOOLPOOL_* variables; the entrypoint is the `toolpool` command.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap: bash's sandbox (docs/sandbox.md); the compose file lets it make namespaces.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY executor ./executor
COPY workers ./workers
# hiredis: redis-py's C parser, a call's round trip about a third faster. dashboard: the web
# page's server (the compose file's dashboard service runs this image too).
RUN pip install ".[hiredis,dashboard]" && rm -rf /src

# Tools run as an unprivileged user, and only /workspace and /sessions are theirs to write.
RUN useradd --create-home --uid 10001 toolpool \
    && mkdir -p /workspace /sessions \
    && chown toolpool:toolpool /workspace /sessions
USER toolpool
WORKDIR /workspace
VOLUME ["/workspace", "/sessions"]

ENV TOOLPOOL_WORKSPACE=/workspace
ENTRYPOINT ["toolpool"]
CMD ["worker"]
