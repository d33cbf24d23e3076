"""On a GPU machine the pytest process and the jobs it starts share the GPU: the pytest process
takes 15% of its memory (not XLA's default 75%), each job process 25% (test_gpu.py). The whole
GPU suite runs with JACCL_DEBUG=INFO unless told otherwise: the logging paths are part of what
it tests."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.15")
os.environ.setdefault("JACCL_DEBUG", "INFO")
