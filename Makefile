# Entry points for people and CI. Each target runs nox; if nox (with uv) is not
# installed, a private tools venv (.venv-tools) is bootstrapped with pip first.

PYTHON ?= python3
TOOLS_VENV := .venv-tools

# nox resolves python3.12 through pyenv only when that version is active, so
# activate every wanted version that is installed (3.11 first: it stays `python3`).
ifeq ($(origin PYENV_VERSION),undefined)
ifneq ($(shell command -v pyenv 2>/dev/null),)
PYENV_VERSION := $(shell for v in 3.11.7 3.12.1 3.13.0; do pyenv prefix $$v >/dev/null 2>&1 && echo $$v; done | paste -sd: -)
ifneq ($(PYENV_VERSION),)
export PYENV_VERSION
endif
endif
endif

HAVE_NOX := $(shell $(PYTHON) -m nox --version >/dev/null 2>&1 \
	&& { command -v uv >/dev/null 2>&1 || $(PYTHON) -m uv --version >/dev/null 2>&1; } && echo yes)
ifeq ($(HAVE_NOX),yes)
NOX := $(PYTHON) -m nox
NOX_DEP :=
else
NOX := $(TOOLS_VENV)/bin/nox
NOX_DEP := $(TOOLS_VENV)/bin/nox
endif

.PHONY: demo test lint types bench sessions

demo: $(NOX_DEP)  ## build a synthetic ERA5-like store and train on it in place
	$(NOX) -s demo

test: $(NOX_DEP)  ## every test session (core on 3.11/3.12, stores, transforms, torch, jax, tf, gpu)
	$(NOX) -t tests

lint: $(NOX_DEP)  ## ruff check and ruff format --check
	$(NOX) -s lint

types: $(NOX_DEP)  ## mypy on every package's src
	$(NOX) -s types

bench: $(NOX_DEP)  ## benchmarks (bench/run.py)
	$(NOX) -s bench

sessions: $(NOX_DEP)  ## list the nox sessions
	$(NOX) -l

$(TOOLS_VENV)/bin/nox:
	$(PYTHON) -m venv $(TOOLS_VENV)
	$(TOOLS_VENV)/bin/python -m pip install --quiet nox uv
