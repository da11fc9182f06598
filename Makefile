# Two entry points, both from nothing: `make demo` and `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check

.PHONY: demo test venv dev lint typecheck docs clean

$(VENV)/.installed: pyproject.toml constraints-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q -c constraints-dev.txt torch==2.13.0
	$(PIP) install -q -c constraints-dev.txt -e .
	touch $@

$(VENV)/.dev-installed: $(VENV)/.installed
	$(PIP) install -q -c constraints-dev.txt -e '.[dev,keras,report,fuzz,ray,runtime,litert,models]' onnx
	# onnx2torch declares torchvision, which would replace the pinned CPU torch; it runs
	# without it for classifiers (see deepfault/models/onnx.py).
	$(PIP) install -q --no-deps onnx2torch
	touch $@

venv: $(VENV)/.installed
dev: $(VENV)/.dev-installed

## Set up and run DeepFault on the embedded default (scikit-learn digits + a small MLP).
demo: venv
	$(VENV)/bin/deepfault run --class all --measure tarantula -k 5 --out deepfault-demo.json

## Set up with the development dependencies; run the linter, the type checker and the whole test suite.
test: dev lint typecheck
	$(PY) -m pytest

## Build the documentation site (docs/ and the API reference) into build/site, warnings as errors.
docs: dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

lint: dev
	$(VENV)/bin/ruff check src tests benchmarks scripts

## mypy over src/deepfault, at the strictness set in pyproject.toml ([tool.mypy]).
typecheck: dev
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache .mypy_cache
