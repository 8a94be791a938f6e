# Two commands do all set-up on a fresh machine:
#   make study   the quick study (study/quick.yaml) through the Prefect flow, on embedded defaults
#   make test    the tests
# Both create a project-local virtual environment first (torch 2.13.0 before everything else).

SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHARED ?= ../shared
STUDY ?= study/quick.yaml

# Offline data: use the shared mirror and the paper's fixed splits when they are beside the checkout.
ifneq ($(wildcard $(SHARED)/datasets/pyg),)
export SIMCALIB_DATA_MIRROR ?= $(abspath $(SHARED)/datasets/pyg)
endif
ifneq ($(wildcard $(SHARED)/datasets/splits),)
export SIMCALIB_SPLITS_DIR ?= $(abspath $(SHARED)/datasets/splits)
endif
export SIMCALIB_PAPER_DIR ?= $(abspath $(SHARED)/paper)

# Keep Prefect, MLflow and matplotlib offline, quiet and inside the project (../shared/STACK.md).
export PREFECT_HOME ?= $(CURDIR)/.prefect
export PREFECT_SERVER_ANALYTICS_ENABLED = false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS ?= 120
export DO_NOT_TRACK = true
export MLFLOW_DISABLE_TELEMETRY = true
export MPLCONFIGDIR ?= $(CURDIR)/.cache/matplotlib

.PHONY: install study headline test test-slow lint benchmark clean chromium report mutation gpu-check gpu-study docs

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

study: install
	$(VENV)/bin/simcalib study run $(STUDY)

# The headline's pass through the flow, written into reports/offline/results: the study file's 12 benchmarks, the
# large datasets first (93% of the CPU-hours) and Cora and Citeseer last. Each finished row is in its benchmark's
# results.csv at once, so the same command resumes from the committed rows (reports/offline/provenance.yaml, flow_pass).
HEADLINE_DATASETS ?= [Computers, Photo, CS, Physics, Cora, Citeseer]
headline: install
	OMP_NUM_THREADS=1 $(VENV)/bin/simcalib study run study/offline.yaml --set 'benchmarks.datasets=$(HEADLINE_DATASETS)' \
		--set save_predictions=false --output reports/offline/results --runner processes --workers 2 --torch-threads 1 \
		--no-report

# Re-render every report folder of reports/ from its committed results.csv files (reports/reports.yaml), then the
# leaderboard and the recommendation per family of graphs (reports/leaderboard.yaml; about 15 s).
report: install
	$(VENV)/bin/simcalib report --every reports/reports.yaml
	$(VENV)/bin/simcalib report --leaderboard reports/leaderboard.yaml --summary-in README.md
	$(VENV)/bin/simcalib report --check-claims reports/claims

# The default suite on TEST_JOBS pytest-xdist workers (TEST_JOBS=0: one process). Two per core on these 2-core
# machines: many tests wait on the subprocesses and servers they start, which leaves a core idle with one worker per
# core (docs/decisions.md, "The test suite on both cores"). The tests using the Prefect test server, the reference
# study's among them, run on one worker (xdist_group, tests/conftest.py); pytest's exit status is make's, so "no
# tests collected" (5) fails too.
TEST_JOBS ?= 4
test: install chromium
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist loadgroup --durations=15

# Headless Chromium from Debian's packages, for the browser tests (they are skipped without it).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "note: chromium is not installed (apt-get install -y chromium); browser tests will be skipped"; fi; }

test-slow: install chromium
	$(PY) -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check simcalib flows tests benchmarks

# Mutation testing (mutmut; [tool.mutmut] in pyproject.toml, docs/mutation-testing.md), not in `make test`:
# each mutant of the modules MUTANTS names is run against the tests that reach it. MUTANTS is a mutant-name glob
# ("simcalib.metrics*", "simcalib.experiment.splits*"). Results are kept in mutants/ (git-ignored): rm -rf mutants for a fresh run.
MUTANTS ?= simcalib.metrics*
MUTATION_JOBS ?= 2
mutation: install
	SIMCALIB_SHARED_DIR=$(abspath $(SHARED)) $(VENV)/bin/mutmut run "$(MUTANTS)" --max-children $(MUTATION_JOBS)
	$(VENV)/bin/mutmut results | grep -v ": not checked$$" || true

# GPU readiness (benchmarks/speed/gpu_check.py; not in `make test`): on a CUDA machine, the quick study's smallest
# configuration calibrated on CUDA against CPU, a backbone trained on CUDA, the GAT attention tests on CUDA and
# one epoch's time per large benchmark; the report goes to GPU_CHECK_OUT. Without CUDA: one line, exit status 2.
GPU_CHECK_OUT ?= reports/performance/gpu_check.txt
gpu-check: install
	$(PY) benchmarks/speed/gpu_check.py --out $(GPU_CHECK_OUT)

# The documentation site (mkdocs.yml: docs/ and the API reference from the docstrings) into site/; a warning
# (a broken link, an equation that does not render) fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

# The headline study on the CUDA devices (benchmarks/gpu/gpu_study.py; not in `make test`): study/offline.yaml with
# device cuda, a task per run and GPU_STUDY_RUNS_PER_DEVICE runs in flight per device (task_runner.runs_per_device),
# into GPU_STUDY_OUT; prints the wall time, runs per minute, device memory and utilisation. Without CUDA: one line,
# exit status 2.
GPU_STUDY_OUT ?= results/gpu
GPU_STUDY_RUNS_PER_DEVICE ?= 4
gpu-study: install
	$(PY) benchmarks/gpu/gpu_study.py --out $(GPU_STUDY_OUT) --runs-per-device $(GPU_STUDY_RUNS_PER_DEVICE)

clean:
	rm -rf .cache .prefect results site
