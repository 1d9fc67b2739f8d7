#!/usr/bin/env bash
# Installs claude-code-log (a Claude Code log to HTML renderer) from PyPI into a virtual
# environment of its own: the peer bench/bench_share.py times beside `ctxscope import -o`
# (issue 34). Not needed by ctxscope or its tests.
set -euo pipefail
venv="${1:-.peer-ccl}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "claude-code-log==1.7.0"
"$venv/bin/claude-code-log" --version
