# Two commands matter: `make quickstart` (main job on the embedded local[N] Spark) and `make test`.
PYTHON ?= python3.11
# Two tested stacks: STACK=pinned (the default: constraints.txt, .venv) and STACK=current (the newest
# releases: constraints-current.txt, .venv-current). `make test STACK=current` runs the suite on the second.
STACK ?= pinned
ifeq ($(STACK),pinned)
CONSTRAINTS := constraints.txt
VENV ?= .venv
else ifeq ($(STACK),current)
CONSTRAINTS := constraints-current.txt
VENV ?= .venv-current
else
$(error STACK=$(STACK) is not a stack of this project: use STACK=pinned (the default) or STACK=current)
endif
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp

.PHONY: setup quickstart test lint doctor bench clean

# The driver JVM's class-data archive (sparkml_par/class_archive.py): written once per JVM and Spark install.
setup: $(STAMP)
	$(PY) -m sparkml_par.class_archive

# Re-runs only when the pins or the package metadata change; the Horovod wheel is cached.
$(STAMP): $(CONSTRAINTS) setup.cfg pyproject.toml scripts/build_horovod.sh sparkml_par/petastorm_patch.py \
		sparkml_par/petastorm_pyarrow_compat.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip setuptools wheel
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) torch
	scripts/build_horovod.sh $(PY)
	$(PY) -m pip install --quiet -c $(CONSTRAINTS) -e '.[test,mlflow]'
	$(PY) -m sparkml_par.petastorm_patch
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

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
