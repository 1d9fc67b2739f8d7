#!/usr/bin/env bash
# Installs the real LangChain v1 packages into a virtual environment of their own
# (docs/design.md, "LangChain policies"): the oracle the langchain-* presets are compared
# with. Tests talk to it through scripts/lc_oracle.py run with this venv's python.
# langchain-core 1.8.3 is the newest whose dependencies (langchain-protocol) install from the
# registry this project builds from.
set -euo pipefail
venv="${1:-.oracle-langchain}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q "langchain==1.5.2" "langchain-core==1.8.3" "tiktoken==0.14.0"
"$venv/bin/python" -c "import langchain.agents.middleware.context_editing as m; print('langchain oracle ready:', m.__file__)"
