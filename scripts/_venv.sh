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
  local target="."
  [ -n "$extras" ] && target=".[$extras]"
  local want
  want="$(sha256sum pyproject.toml | cut -d' ' -f1) $target"
  if [ ! -f "$VENV/.toolpool-installed" ] || [ "$(cat "$VENV/.toolpool-installed")" != "$want" ]; then
    echo "== installing toolpool into $VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$target"
    echo "$want" > "$VENV/.toolpool-installed"
  fi
}
