# Two commands matter: `make quickstart` (main job on the embedded local[N] Spark) and `make test`.
# Tested stacks, each an exact version set in its constraints file and its own venv (docs/setup.md):
# STACK=pinned (the default: constraints.txt, .venv), and for every other NAME constraints-NAME.txt and
# .venv-NAME: current, databricks-15.4, databricks-16.4, databricks-17.3, and cuda (CUDA torch, Horovod with
# NCCL; not in CI). The constraints file's first line names its Python (`# python: 3.12`).
STACK ?= pinned
STACKS := pinned current databricks-15.4 databricks-16.4 databricks-17.3 cuda
ifeq ($(filter $(STACK),$(STACKS)),)
$(error STACK=$(STACK) is not a stack of this project: use one of $(STACKS))
endif
ifeq ($(STACK),pinned)
CONSTRAINTS := constraints.txt
VENV ?= .venv
else
CONSTRAINTS := constraints-$(STACK).txt
VENV ?= .venv-$(STACK)
endif
PYTHON_VERSION := $(shell sed -n 's/^\# python: *//p' $(CONSTRAINTS))
PYTHON ?= $(shell scripts/find_python.sh $(PYTHON_VERSION))
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp

.PHONY: setup quickstart test lint doctor bench docs clean

# The driver JVM's class-data archive (sparkml_par/spark_runtime/class_archive.py): written once per JVM and Spark install.
setup: $(STAMP)
	$(PY) -m sparkml_par.spark_runtime.class_archive

# Re-runs only when the pins or the package metadata change; the Horovod wheel is cached.
$(STAMP): $(CONSTRAINTS) constraints-build.txt setup.cfg pyproject.toml scripts/build_horovod.sh
	@test -n "$(PYTHON)" || { echo "make: no Python $(PYTHON_VERSION) for STACK=$(STACK) (scripts/find_python.sh)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade -c $(CONSTRAINTS) pip setuptools wheel
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) torch
	scripts/build_horovod.sh $(PY) $(CONSTRAINTS)
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) --build-constraint constraints-build.txt -e '.[test,mlflow]'
	$(VENV)/bin/sparkml-par doctor
	touch $(STAMP)

quickstart: setup
	$(VENV)/bin/sparkml-par run conf/quickstart.yaml

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# ruff's checks and formatter (configured in pyproject.toml); `ruff format .` fixes what the second one finds.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

doctor: setup
	$(VENV)/bin/sparkml-par doctor

# Every benchmark, one table (benchmarks/results/suite.md); BENCH_ARGS="convert read" for some, "--scale" for the cost curve.
bench: setup
	$(PY) -m benchmarks $(BENCH_ARGS)

# The config reference page from the code; tests/test_cli.py checks that it is current.
docs: setup
	$(VENV)/bin/sparkml-par config --reference --markdown > docs/config-reference.md

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
