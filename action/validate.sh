#!/usr/bin/env bash
# The step of action.yml: install gpux from the action's own checkout unless a gpux is already on PATH, then
# validate the given paths with GitHub annotations (::error file=...,line=...::). Exit 3 when a file is invalid.
set -euo pipefail
if ! command -v gpux >/dev/null 2>&1; then
  python -m pip install --quiet --disable-pip-version-check "${GPUX_ACTION_PATH:?set by action.yml}"
fi
read -r -a paths <<< "${GPUX_PATHS:-.}"
exec gpux validate --format github "${paths[@]}"
