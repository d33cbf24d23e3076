# setup: a virtual environment with jax_jaccl built and installed (editable)
# demo:  the main job: 2 processes x 2 CPU devices train a model with jaccl collectives, then 4 x 1
#        (where the jax.lax reference step's own collectives run on jaccl too)
# test:  the test suite (test-fast: what runs in the pytest process alone, no jobs, no builds)
# bench: jaccl-bench collectives, 2 processes x 1 device, against jax's own collectives
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
SOURCES := pyproject.toml CMakeLists.txt $(shell find xla_ffi -name '*.cc' -o -name '*.c' -o -name '*.txt' -o -name '*.py' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt)

.PHONY: setup demo test test-fast bench bench-setup clean

setup: $(VENV)/.installed

$(VENV)/.installed: $(SOURCES)
	@# libfabric for the OFI transport (RDMA NICs), from apt where we may; optional otherwise
	@pkg-config --exists libfabric 2>/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q libfabric-dev libfabric-bin pkg-config || (apt-get update -q && \
	   apt-get install -y -q libfabric-dev libfabric-bin pkg-config)); } || \
	  echo "note: no libfabric (apt-get install libfabric-dev): building without the OFI transport"
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q 'jax>=0.10' numpy nanobind 'scikit-build-core>=0.10' ninja cmake pytest pytest-timeout
	$(PY) -m pip install -q --no-build-isolation -e '.[test]'
	touch $@

demo: setup
	$(VENV)/bin/jaccl-run -n 2 --devices-per-process 2 -- $(PY) examples/train_data_parallel.py
	$(VENV)/bin/jaccl-run -n 4 -- $(PY) examples/train_data_parallel.py   # jax.lax's step on jaccl too

test: setup
	$(PY) -m pytest -q tests

test-fast: setup
	$(PY) -m pytest -q tests/in_process

bench: setup
	$(VENV)/bin/jaccl-bench collectives --nprocs 2 --runs 3 --vs lax --plot collectives.png

# Open MPI (apt) and the MPI peers for --vs mpi4jax,mpi (mpi4jax's build looks for CUDA: hide it)
bench-setup: setup
	command -v mpirun >/dev/null || (apt-get update -q && apt-get install -y -q openmpi-bin libopenmpi-dev)
	$(PY) -m pip install -q --no-build-isolation -e '.[bench]'
	CUDA_PATH=$$(mktemp -d) $(PY) -m pip install -q mpi4jax

clean:
	rm -rf build $(VENV)
