#!/usr/bin/env bash
# Prepare a fresh machine: Debian packages the tests use, a virtualenv in .venv with
# Gleaner and its dev dependencies, and the C shim. Idempotent: fast when all is there.
# Usage: scripts/bootstrap.sh [--no-apt]
set -euo pipefail
cd "$(dirname "$0")/.."

want_apt=1
[[ "${1:-}" == "--no-apt" ]] && want_apt=0

if [[ $want_apt == 1 ]]; then
  missing=()
  command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v gcc >/dev/null 2>&1 || missing+=(gcc)
  command -v make >/dev/null 2>&1 || missing+=(make)
  if [[ ${#missing[@]} -gt 0 ]]; then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    $SUDO apt-get update -q
    # With recommends: chromium's fonts come that way (the tests were run with them).
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q \
      $(printf '%s\n' "${missing[@]}" | sort -u)
  fi
fi

PY=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  echo "bootstrap: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.gleaner-installed
# Four distributions from this checkout, editable: gleaner itself, the node protocol, the
# vLLM hook and the test harnesses (the last three are not part of the gleaner wheel).
projects=(pyproject.toml protocol/pyproject.toml vllm-hook/pyproject.toml testing/pyproject.toml)
stale=0
[[ -f $stamp ]] || stale=1
for f in "${projects[@]}"; do [[ $f -nt $stamp ]] && stale=1; done
if [[ $stale == 1 ]]; then
  echo "bootstrap: installing gleaner[dev] and its sibling distributions into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ./protocol -e ./vllm-hook -e '.[dev]' -e ./testing
  touch "$stamp"
fi

if [[ -f runtime-agent/shim/Makefile ]]; then
  make -s -C runtime-agent/shim
fi
