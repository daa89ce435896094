#!/usr/bin/env bash
# Prints the path of a CPython interpreter of the given major.minor version (the Makefile's stacks need
# 3.11, 3.12 and 3.13): `pythonX.Y` on PATH when it runs, else the newest pyenv install of that version.
#
# Usage: scripts/find_python.sh 3.12
set -euo pipefail
WANT=${1:?usage: scripts/find_python.sh MAJOR.MINOR}
if command -v "python$WANT" >/dev/null && "python$WANT" -c 'pass' 2>/dev/null; then
  command -v "python$WANT"
  exit 0
fi
if command -v pyenv >/dev/null; then
  VERSION=$(pyenv versions --bare | grep -E "^${WANT//./\\.}\.[0-9]+$" | sort -V | tail -n 1 || true)
  if [ -n "$VERSION" ]; then
    echo "$(pyenv root)/versions/$VERSION/bin/python$WANT"
    exit 0
  fi
fi
echo "find_python: no Python $WANT found: install it (pyenv install $WANT, or your distribution's python$WANT)" >&2
exit 1
