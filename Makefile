# The two commands of the README:
#   make demo   bring the local Slurm cluster up and run the demo on it
#   make test   run every test (unit and real-cluster integration)
PYTHON ?= python3
GPUPACK = $(PYTHON) -m slurm_plugin

.PHONY: deps demo test unit down bench

deps:
	PYTHON=$(PYTHON) ./scripts/install-deps.sh

demo: deps
	$(GPUPACK) devcluster up
	$(GPUPACK) demo

test: deps
	$(PYTHON) -m pytest

unit: deps
	$(PYTHON) -m pytest -m "not integration"

down:
	$(GPUPACK) devcluster down

bench: deps
	$(GPUPACK) devcluster up
	$(GPUPACK) bench submit --jobs 500 --json
