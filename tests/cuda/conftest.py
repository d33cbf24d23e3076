"""On a GPU machine the pytest process and the jobs it starts share the GPU: the pytest process
takes 15% of its memory (not XLA's default 75%), each job process 25% (test_gpu.py). The jobs
run with JACCL_DEBUG=INFO (test_gpu.py); run_on_gpu.sh sets it for the pytest process too. It
is not set here: this file is loaded whenever pytest collects tests/, and INFO lines would end
up in every other suite's jobs."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.15")

# The in-process GPU tests take jax.lax's reference on as many CPU devices as there are GPUs
# (an 8-GPU node needs 8; tests/conftest.py gave this process 4). JAX has not started yet.
from gpu_collectives import reference_devices  # noqa: E402

if not os.environ.get("JACCL_PYTEST_JOB_DIR") and reference_devices(4) > 4:
    import jax

    jax.config.update("jax_num_cpu_devices", reference_devices(4))
