# The two commands of the README:
#   make demo   bring the local Slurm cluster up and run the demo on it
#   make test   run every test (unit and real-cluster integration)
# Both take SLURM=V (22.05, 24.11, 26.05) to run on that release instead of the host's own:
# from a Debian root the project builds and keeps (`gpupack root build --slurm V`).
# The suite and its test tools go into a virtual environment of the checkout's own (`make deps`
# makes it with `python3 -m venv`), never into the system's Python: a job's plain `python3` on a
# node must not find the suite's modules (packer, predictor, simulator ... are PyPI projects' names
# too). `. .venv/bin/activate` puts its `gpupack` first in PATH.
VENV ?= .venv
PYTHON ?= $(VENV)/bin/python3
GPUPACK = $(PYTHON) -m slurm_plugin
SLURM ?=
ON_SLURM = $(if $(SLURM),--slurm $(SLURM))
# pytest in the root of that release (the host's own: as is)
IN_SLURM = $(if $(SLURM),$(GPUPACK) root run --slurm $(SLURM) -- python3,$(PYTHON))

.PHONY: deps demo test unit down bench

deps:
	VENV=$(VENV) PYTHON=$(PYTHON) ./scripts/install-deps.sh

demo: deps
	$(GPUPACK) devcluster up $(ON_SLURM)
	$(GPUPACK) demo $(ON_SLURM)

# `make test`: the unit tests spread over the cores (pytest-xdist, TEST_WORKERS), then the live
# tests one at a time on a local cluster of the run's own (fresh state folder, free ports, taken
# down at the end); both parts always run. JUNIT=PREFIX writes PREFIX-unit.xml and PREFIX-live.xml.
# UNIT=release runs only the unit tests that depend on the Slurm release (marked `release`:
# CI runs the others once, in the host's leg).
TEST_WORKERS ?= auto
JUNIT ?=
UNIT ?= all
UNIT_MARK = $(if $(filter release,$(UNIT)),not integration and release,not integration)
test: deps
	$(IN_SLURM) -m pytest -m "$(UNIT_MARK)" -n $(TEST_WORKERS) $(if $(JUNIT),--junitxml=$(JUNIT)-unit.xml); \
	unit=$$?; \
	$(IN_SLURM) -m pytest -m integration $(if $(JUNIT),--junitxml=$(JUNIT)-live.xml); \
	live=$$?; \
	[ $$unit = 0 ] && [ $$live = 0 ]

unit: deps
	$(IN_SLURM) -m pytest -m "not integration" -n $(TEST_WORKERS)

down:
	$(GPUPACK) devcluster down $(ON_SLURM)

bench: deps
	$(GPUPACK) devcluster up $(ON_SLURM)
	$(GPUPACK) bench submit --jobs 500 --json $(ON_SLURM)
