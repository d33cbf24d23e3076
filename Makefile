# setup: a virtual environment (.venv) with jax_jaccl built and installed (editable) on the newest
#        jax a user gets: jax 0.11 and later need Python >= 3.12, so it is made with the first of
#        python3.12, python3.13 and pyenv's 3.12 / 3.13 that runs (PYTHON=... overrides)
# demo:  the main job: 2 processes x 2 CPU devices, then 4 x 1, train a 2M-parameter model with
#        jaccl's collectives and with jax.lax's (on gloo, then on jaccl), checking every step
#        (bit for bit on one engine, within float32's summation-order bound on gloo), and print
#        the step times side by side (about a minute per layout)
# test:  the test suite on the newest jax: the fast loop on 2 pytest-xdist workers, then the
#        jobs and builds one at a time (test-fast: the fast loop alone, what runs in the pytest
#        process, no jobs, no builds)
# test-oldest: the oldest jax supported (jax 0.10.2 on Python 3.11, in .venv-oldest): the fast
#        loop and one job of each kind (EACH_KIND_OF_JOB)
# test-newest: a canary, not part of .ci/run: the newest jax pip has, past pyproject's bound (in
#        .venv-newest), the fast loop and one job of each kind; it prints which jax it ran
#        (docs/tests.md: how to widen the bound once it passes)
# suites: flax's, chex's, dm-haiku's and optax's own tests (pinned, from PyPI), plain and with
#        jax_jaccl.lax in jax.lax's place, in build/suites (tests/suites/run_suites.py; ~9 min)
# bench: jaccl-bench collectives, 2 processes x 1 device, against jax's own collectives
VENV ?= .venv
OLDEST_VENV ?= .venv-oldest
NEWEST_VENV ?= .venv-newest
# pyproject's jax requirement (its bound is the newest jax CI passed)
SUPPORTED_JAX := '$(shell sed -n 's/^dependencies = \["\(jax[^"]*\)".*/\1/p' pyproject.toml)'
OLDEST_JAX := jax==0.10.2 jaxlib==0.10.2
PYTHON ?= $(shell for p in python3.12 python3.13 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3 \
	$$(pyenv root 2>/dev/null)/versions/3.13*/bin/python3; do \
	"$$p" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
OLDEST_PYTHON ?= $(shell for p in python3.11 $$(pyenv root 2>/dev/null)/versions/3.11*/bin/python3; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 11)' >/dev/null 2>&1 && { echo "$$p"; break; }; done)
PY := $(VENV)/bin/python
OLDEST_PY := $(OLDEST_VENV)/bin/python
NEWEST_PY := $(NEWEST_VENV)/bin/python
# What the oldest and the newest jax run besides the fast loop: one of every kind of job (fresh
# processes, each kind of fault on one host (how a failure reaches JAX depends on its version; the
# transports, which do not, ran on the newest), going on without a lost process and a process
# rejoining (JAX's incarnations, its live_devices), a lost process 0 (JAX's coordination
# service in jaccl-run, through jaxlib's own entry point), XLA's
# collectives through the mpiabi library, the launcher and demo, the transport choice and jaccl-info
# with Debian's pyverbs (built for the system Python only), the batteries on one host and
# between emulated hosts, MoE, every order of axes, random programs across processes, gloo and
# jaccl on a warm compilation cache, a crash after a jaccl op)
FAULTS := tests/processes/test_faults.py
EACH_KIND_OF_JOB := tests/processes/test_fresh_processes.py \
	"$(FAULTS)::test_ranks_that_disagree_all_get_an_error_naming_both[shape-1host]" \
	"$(FAULTS)::test_ranks_that_disagree_all_get_an_error_naming_both[sites-1host]" \
	"$(FAULTS)::test_killed_peer_every_survivor_raises_naming_it[1host]" \
	"$(FAULTS)::test_stalled_peer_times_out_naming_it[1host]" \
	$(FAULTS)::test_an_uncaught_exception_ends_the_job_at_once_naming_it \
	$(FAULTS)::test_nothing_left_behind_after_exit \
	"tests/processes/test_recovery.py::test_survivors_go_on_and_match_a_job_resumed_from_their_state[blocking]" \
	"tests/processes/test_recovery.py::test_survivors_go_on_and_match_a_job_resumed_from_their_state[jax-lax]" \
	"tests/processes/test_recovery.py::test_survivors_go_on_and_match_a_job_resumed_from_their_state[jax-lax-2-devices]" \
	"tests/processes/test_recovery.py::test_a_process_started_again_rejoins_with_the_survivors_state[after-the-others-went-on]" \
	"tests/processes/test_recovery.py::test_survivors_go_on_and_match_a_job_resumed_from_their_state[process-0]" \
	tests/processes/test_xla_collectives.py tests/processes/test_launcher.py \
	tests/processes/test_jax_harness.py \
	tests/processes/test_transport_choice.py \
	tests/processes/test_warm_cache.py tests/processes/test_crash_signals.py \
	tests/processes/test_cpu_pool.py \
	tests/plugin/test_axis_orders_as_jobs.py \
	"tests/plugin/test_battery_as_jobs.py::test_collectives_match_lax[2x2]" \
	"tests/plugin/test_battery_as_jobs.py::test_collectives_match_lax[4x1-2hosts-lo-tcp]" \
	"tests/plugin/test_moe_as_jobs.py::test_moe_matches_reference[2x2]" \
	"tests/processes/test_random_programs_as_jobs.py::test_random_programs_match_lax_across_processes[2x2]"
SOURCES := pyproject.toml CMakeLists.txt $(shell find xla_ffi -name '*.cc' -o -name '*.c' -o -name '*.txt' -o -name '*.py' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt)

.PHONY: setup setup-oldest setup-newest demo test test-fast test-oldest test-newest suites bench \
	bench-setup libfabric clean

setup: $(VENV)/.installed

setup-oldest: $(OLDEST_VENV)/.installed

setup-newest: $(NEWEST_VENV)/.installed

# libfabric for the OFI transport (RDMA NICs), from apt where we may; optional otherwise
libfabric:
	@pkg-config --exists libfabric 2>/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get install -y -q libfabric-dev libfabric-bin pkg-config || (apt-get update -q && \
	   apt-get install -y -q libfabric-dev libfabric-bin pkg-config)); } || \
	  echo "note: no libfabric (apt-get install libfabric-dev): building without the OFI transport"

# $(call venv,VENV,INTERPRETER,JAX REQUIREMENT): the environment, its tools, jax_jaccl built in it
define venv
	@test -n "$(2)" || { echo "no suitable Python found: $(3) needs $(4) (set PYTHON=... or install it)"; exit 1; }
	test -x $(1)/bin/python || $(2) -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q $(3) numpy nanobind 'scikit-build-core>=0.10' ninja cmake pytest pytest-timeout
	$(1)/bin/python -m pip install -q --no-build-isolation -e '.[test]'
	touch $(1)/.installed
endef

$(VENV)/.installed: $(SOURCES)
	$(MAKE) -s libfabric
	$(call venv,$(VENV),$(PYTHON),$(SUPPORTED_JAX),Python >= 3.12)

$(OLDEST_VENV)/.installed: $(SOURCES)
	$(MAKE) -s libfabric
	$(call venv,$(OLDEST_VENV),$(OLDEST_PYTHON),$(OLDEST_JAX),Python 3.11)

# the project as in setup, then the newest jax and jaxlib over it (pip warns of the bound)
$(NEWEST_VENV)/.installed: $(SOURCES)
	$(MAKE) -s libfabric
	rm -f $@
	$(call venv,$(NEWEST_VENV),$(PYTHON),$(SUPPORTED_JAX),Python >= 3.12)
	$(NEWEST_PY) -m pip install -q --upgrade jax jaxlib || { rm -f $@; exit 1; }

demo: setup
	$(PY) examples/demo.py

# --durations: the slowest tests in every run's log, where the suite's time goes (docs/tests.md)
test: setup
	$(PY) -m pytest -q -n 2 tests/in_process --durations=10
	$(PY) -m pytest -q tests --ignore=tests/in_process --durations=30

test-fast: setup
	$(PY) -m pytest -q -n 2 tests/in_process

test-oldest: setup-oldest
	$(OLDEST_PY) -m pytest -q -n 2 tests/in_process --durations=10
	$(OLDEST_PY) -m pytest -q $(EACH_KIND_OF_JOB) --durations=15

test-newest: setup-newest
	@echo "test-newest: pyproject allows "$(SUPPORTED_JAX)"; this run has:"
	@$(NEWEST_PY) -c 'import jax, jaxlib; print(f"jax {jax.__version__}, jaxlib {jaxlib.__version__}")'
	$(NEWEST_PY) -m pytest -q -n 2 tests/in_process --durations=10
	$(NEWEST_PY) -m pytest -q $(EACH_KIND_OF_JOB) --durations=15

suites: setup
	VENV=$(VENV) $(PY) tests/suites/run_suites.py

bench: setup
	$(VENV)/bin/jaccl-bench collectives --nprocs 2 --runs 3 --vs lax --plot collectives.png

# Open MPI (apt) and the MPI peers for --vs mpi4jax,mpi (mpi4jax's build looks for CUDA: hide it)
bench-setup: setup
	(command -v mpirun && echo '#include <mpi.h>' | mpicc -E - ) >/dev/null 2>&1 || \
	  (apt-get update -q && apt-get install -y -q openmpi-bin libopenmpi-dev)
	$(PY) -m pip install -q --no-build-isolation -e '.[bench]'
	CUDA_PATH=$$(mktemp -d) $(PY) -m pip install -q mpi4jax

clean:
	rm -rf build $(VENV) $(OLDEST_VENV) $(NEWEST_VENV)
