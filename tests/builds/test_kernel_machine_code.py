"""The reduction kernel's machine code keeps a step's loads in flight together (issue 11: bytes
in flight per SM are what a memory-bound kernel runs on). In every float32 and bfloat16 sum
kernel for 2-8 operands, as built here for sm_90 (the H200), the main loop issues all of a
step's 16-byte loads (eight; six for 3 operands, 5-7 for 5-7) before the first instruction
that reads one of them. ptxas decides this, not the source: before the gate in reduce.cu
(hold_until_loaded), the 5-8 operand kernels issued 2-4 loads, then an add, then the rest."""

from __future__ import annotations

import re

import pytest

import jax_jaccl._ext as ext
import machine_code

pytestmark = [
    pytest.mark.skipif(ext.cuda_engine is None, reason="CPU-only build: no _jaccl_cuda to read"),
    pytest.mark.skipif(machine_code.cuobjdump() is None,
                       reason="no cuobjdump/nvdisasm (a CUDA toolkit, or the test extras' nvidia wheels)"),
]

SUM_KERNEL = re.compile(r"reduce_vectors<\(jaccl::ReduceOp\)0, (float|__nv_bfloat16), (\d+), (\d+)>")


@pytest.fixture(scope="module")
def sum_kernels():
    found = {}
    for name, instructions in machine_code.kernels(ext.cuda_engine.__file__, "sm_90").items():
        match = SUM_KERNEL.search(name)
        if match and 2 <= int(match.group(2)) <= 8:
            found[(match.group(1), int(match.group(2)))] = (int(match.group(3)), instructions)
    if not found:
        pytest.skip("the module has no sm_90 code (built for other architectures)")
    return found


@pytest.mark.parametrize("dtype", ["float", "__nv_bfloat16"])
@pytest.mark.parametrize("operands", range(2, 9))
def test_sum_kernel_issues_a_steps_loads_before_using_any(sum_kernels, dtype, operands):
    unroll, instructions = sum_kernels[(dtype, operands)]
    loads, before_first_use = machine_code.loads_in_flight(instructions)
    assert loads == unroll * operands  # the main loop: a step's loads, one per operand and vector
    assert before_first_use == loads, f"{before_first_use} of {loads} loads issued before the first use"


def test_the_count_sees_an_early_use():
    """A loop that adds its first two loads before issuing the third (what ptxas did)."""
    code = ["LDG.E.EF.128 R8, desc[UR6][R8.64]", "LDG.E.EF.128 R12, desc[UR6][R14.64]",
            "IADD3 R18, P0, R36, R29, RZ", "FADD R39, R8, R12", "LDG.E.EF.128 R8, desc[UR6][R18.64]",
            "FADD R39, R8, R39", "STG.E.EF.128 desc[UR6][R36.64], R16", "@!P0 BRA 0x0"]
    instructions = [(16 * i, text) for i, text in enumerate(code)]
    assert machine_code.loads_in_flight(instructions) == (3, 2)
    # An address register that a load once filled, rewritten before it is read, is no use.
    code[2:4] = ["IADD3 R12, P0, R36, R29, RZ", "IADD3 R19, P0, R12, R29, RZ"]
    assert machine_code.loads_in_flight([(16 * i, text) for i, text in enumerate(code)]) == (3, 3)
