#!/usr/bin/env bash
# Creates the project-local Python environment .venv with tools/python-requirements.txt (test references only),
# or brings an existing one up to those pins. Needs python3 with venv and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
requirements=tools/python-requirements.txt
stamp=.venv/.requirements
if [[ -f $stamp ]] && cmp -s "$requirements" "$stamp"; then
  echo "setup-python: .venv up to date"
  exit 0
fi
[[ -x .venv/bin/python ]] || python3 -m venv .venv
echo "setup-python: installing $(grep -vc '^#' "$requirements") pinned packages into .venv (torch is several GB)"
.venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
