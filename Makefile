# The two commands of the README. Each creates .venv and installs the project when needed.
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?= -q -n auto

.PHONY: demo test lint bench

$(VENV)/.installed: pyproject.toml hatch_build.py parsers/_native/bulkscan.c
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/forensics demo -o forensics-demo

test: $(VENV)/.installed
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.installed
	$(PY) bench/run.py --size 256MB
