# The README's two commands are `make app` and `make test`; everything they need is installed here.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ORACLE_VENV ?= .oracle-venv
ORACLE_STAMP := $(ORACLE_VENV)/.installed
ORACLE_LC_VENV ?= .oracle-langchain
ORACLE_LC_STAMP := $(ORACLE_LC_VENV)/.installed
PEER_CCL_VENV ?= .peer-ccl
PEER_CCL_STAMP := $(PEER_CCL_VENV)/.installed
PORT ?= 8501

.PHONY: install app test test-fast lint format bench oracle peers golden browser postgresql demo clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# The hello-agents 0.2.8 package in a venv of its own (its pins differ from ours): the oracle.
$(ORACLE_STAMP): scripts/setup_oracle.sh
	bash scripts/setup_oracle.sh $(ORACLE_VENV)
	touch $(ORACLE_STAMP)

# langchain and langchain-core from PyPI in a venv of their own: the langchain-* presets' oracle.
$(ORACLE_LC_STAMP): scripts/setup_oracle_langchain.sh
	bash scripts/setup_oracle_langchain.sh $(ORACLE_LC_VENV)
	touch $(ORACLE_LC_STAMP)

oracle: $(ORACLE_STAMP) $(ORACLE_LC_STAMP)

# claude-code-log from PyPI in a venv of its own: the peer bench/bench_share.py times.
$(PEER_CCL_STAMP): scripts/setup_peer_ccl.sh
	bash scripts/setup_peer_ccl.sh $(PEER_CCL_VENV)
	touch $(PEER_CCL_STAMP)

peers: $(PEER_CCL_STAMP)

# Debian's Chromium for the Playwright tests (root on a fresh machine; skipped quietly otherwise).
browser:
	bash scripts/setup_browser.sh

# Debian's PostgreSQL for the team store's tests (root on a fresh machine; a note otherwise).
postgresql:
	bash scripts/setup_postgresql.sh

app: $(STAMP)
	$(PY) -m ctxcore app --port $(PORT)

# Two workers (pytest-xdist): the suite's ~3,100 tests take about half the time of one.
test: $(STAMP) $(ORACLE_STAMP) $(ORACLE_LC_STAMP) browser postgresql
	$(PY) -m pytest -q -n 2

# The edit-test loop: everything but the browser and slow tests, on every CPU (<= 90 s on 2).
test-fast: $(STAMP) postgresql
	$(PY) -m pytest -q -n auto -m "not browser and not slow"

lint: $(STAMP)
	$(VENV)/bin/ruff check ctxcore ctxapp tests bench scripts
	$(VENV)/bin/ruff format --check ctxcore ctxapp tests bench scripts
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff format ctxcore ctxapp tests bench scripts
	$(VENV)/bin/ruff check --fix ctxcore ctxapp tests bench scripts

golden: $(STAMP) $(ORACLE_STAMP)
	$(PY) scripts/make_golden.py --oracle $(ORACLE_VENV)/bin/python

# Every speed table of the issues (several minutes; bench_app needs Chromium: make browser).
bench: $(STAMP) $(ORACLE_STAMP)
	$(PY) bench/bench_engine.py
	$(PY) bench/bench_hello_agents.py --oracle $(ORACLE_VENV)/bin/python
	$(PY) bench/bench_store.py
	$(PY) bench/bench_diagnostics.py
	$(PY) bench/bench_app.py --keep bench/out/app
	$(PY) bench/bench_app_server.py bench/out/app

demo: $(STAMP)
	$(PY) -m ctxcore demo

clean:
	rm -rf $(VENV) $(ORACLE_VENV) $(ORACLE_LC_VENV) $(PEER_CCL_VENV) .pytest_cache .mypy_cache .ruff_cache
