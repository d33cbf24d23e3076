"""Cases that need a fresh Python process of their own (one process, no job): a program
whose compilation used to abort the process, run-time errors after which the process's jaccl
world is stopped, and a setting read when jaccl starts. Each runs `python -c` with a timeout
and reads what it printed."""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

PARTITIONERS = ["shardy", "gspmd"]
SCHEDULES = ["direct", "frames"]


ISSUE_EXAMPLE = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    jax.config.update("jax_use_shardy_partitioner", sys.argv[1] == "shardy")
    from jax.sharding import Mesh, PartitionSpec as P
    import jax_jaccl as jaccl
    mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("x", "y"))
    f = jax.jit(jax.shard_map(lambda b: jaccl.all_reduce(b, "y"), mesh=mesh,
                in_specs=P(None, "y"), out_specs=P(), axis_names={"y"}))
    print("RESULT", np.asarray(f(jnp.arange(16.0).reshape(2, 8))).tolist())
""")


@pytest.mark.parametrize("name", PARTITIONERS)
def test_the_example_that_aborted_the_process_now_computes_psum(name):
    done = subprocess.run([sys.executable, "-c", ISSUE_EXAMPLE, name], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, JACCL_TIMEOUT="30"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT [[4.0, 6.0, 8.0, 10.0], [20.0, 22.0, 24.0, 26.0]]" in done.stdout, done.stdout


BAD_ID = textwrap.dedent("""
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P, NamedSharding
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((4,), ("x",))
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P("x")))
    idx = np.zeros((16, 2), np.int32); idx[:, 1] = 1; idx[5, 1] = 99
    def f(x, i, w):
        return jaccl.moe_dispatch(x, i, w, num_experts=8, capacity=4, axis_name="x")[0][None]
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"),) * 3, out_specs=P("x")))
    try:
        g(put(np.ones((16, 4), np.float32)), put(idx), put(np.ones((16, 2), np.float32))).block_until_ready()
    except Exception as e:
        print("RAISED", str(e))
""")


def test_out_of_range_expert_is_a_run_time_error():
    done = subprocess.run([sys.executable, "-c", BAD_ID], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JACCL_TIMEOUT="10"))
    assert "RAISED" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "expert id 99 at flat index 3 of topk_idx is out of range [-1, 8)" in done.stdout


STRICT = textwrap.dedent("""
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P, NamedSharding
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((4,), ("x",))
    xs = [jax.device_put(np.full((4 * 512, 64), i + 1, np.float32), NamedSharding(mesh, P("x")))
          for i in range(3)]

    def body(a, b, c):
        # Independent collectives in three blocks: the loop body, the cond branch and the top.
        looped = jax.lax.fori_loop(0, 2, lambda i, v: v + (jaccl.all_reduce(v, "x") / 4 - v), a)
        branched = jax.lax.cond(True, lambda v: jaccl.all_gather(v, "x", tiled=True)[:512],
                                lambda v: v, b)
        return looped, branched, jaccl.reduce_scatter(c, "x", tiled=True)

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"),) * 3,
                              out_specs=(P("x"), P("x"), P("x"))))
    assert jax.make_jaxpr(f)(*xs).effects, "strict mode must carry an ordered effect"
    import re
    lanes = [int(s) for s in re.findall(r"\\blane = (-?\\d+) : i64", f.lower(*xs).as_text())]
    assert lanes == [0, 0, 0], lanes  # one token: lane 0
    for _ in range(20):
        looped, branched, scattered = f(*xs)
        assert np.all(np.asarray(looped) == 1) and np.all(np.asarray(branched) == 2)
        assert np.all(np.asarray(scattered) == 12)
    print("ok")
""")


def test_strict_order_threads_one_token_through_control_flow():
    done = subprocess.run([sys.executable, "-c", STRICT], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JACCL_STRICT_ORDER="1",
                                                JACCL_TIMEOUT="20"))
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


BAD_RAGGED = textwrap.dedent("""
    import sys
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P, NamedSharding
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((4,), ("x",))
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P("x")))
    n = 4
    sizes = np.ones((n, n), np.int32)
    in_off = np.tile(np.arange(n, dtype=np.int32), (n, 1))
    out_off = np.tile(np.arange(n, dtype=np.int32)[:, None], (1, n))  # s lands at row s
    recv = np.ones((n, n), np.int32)
    case = sys.argv[1]
    if case == "reads-past-the-operand":
        in_off[2, 3] = 7            # device 2 reads rows [7, 8) of an operand of 4 rows
    elif case == "writes-past-the-output":
        out_off[1, 0] = 6           # device 1 writes rows [6, 7) of device 0's 6-row output
    elif case == "sizes-disagree":
        recv[3, 1] = 2              # device 3 expects 2 rows from device 1, which sends 1
    elif case == "overlap":
        out_off[2, 0] = 1           # devices 1 and 2 both write row 1 of device 0
    def f(o, y, a, b, c, d):
        return jaccl.ragged_all_to_all(o, y, a[0], b[0], c[0], d[0], axis_name="x")
    g = jax.jit(jax.shard_map(f, mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x")))
    try:
        out = g(put(np.ones((16, 1), np.float32)), put(np.zeros((24, 1), np.float32)),
                *[put(v) for v in (in_off, sizes, out_off, recv)])
        out = np.asarray(out).reshape(4, 6)
        assert case == "valid" and (out[:, :4] == 1).all() and (out[:, 4:] == 0).all(), out
        print("NO ERROR")
    except Exception as e:
        print("RAISED", str(e).replace(chr(10), " "))
""")


@pytest.mark.parametrize("name", SCHEDULES)
@pytest.mark.parametrize("case, match", [
    ("reads-past-the-operand", "input_offsets\\[3\\] = 7 with send_sizes\\[3\\] = 1 reads past the "
                               "operand's 4 rows"),
    ("writes-past-the-output", "writes rows \\[6, 7\\) of the output of .*which has 6 rows"),
    ("sizes-disagree", "ranks disagree: .*expects recv_sizes\\[1\\] = 2 rows from .*which sends "
                       "send_sizes\\[3\\] = 1"),
    ("overlap", "slices 1 .* and 2 .* overlap in the output of rank 0 .*rows \\[1, 2\\) and "
                "\\[1, 2\\)"),
    ("valid", "NO ERROR"),
])
def test_bad_offsets_and_sizes_are_a_clear_error(case, match, name):
    """Each case changes one entry of valid arguments (the "valid" case: they run)."""
    env = dict(os.environ, JACCL_TIMEOUT="10")
    if name == "frames":
        env["JACCL_ALGO"] = "mesh"
    done = subprocess.run([sys.executable, "-c", BAD_RAGGED, case], capture_output=True,
                          text=True, timeout=120, env=env)
    assert ("RAISED" in done.stdout) == (case != "valid"), done.stdout + done.stderr[-3000:]
    assert re.search(match, done.stdout), done.stdout


EIGHT_DEVICES = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_num_cpu_devices", 8)
    from jax import lax as theirs
    from jax.sharding import PartitionSpec as P
    from jax_jaccl import lax as ours

    def cases(lax, axis, n):
        shift = [(i, (i + 3) % n) for i in range(n)]
        half = [(i, (i + 1) % n) for i in range(0, n, 2)]  # a partial permutation
        return {
            "psum": lambda v: lax.psum(v, axis),
            "pmean": lambda v: lax.pmean(v, axis),
            "pmax": lambda v: lax.pmax(v, axis),
            "pmin": lambda v: lax.pmin(v, axis),
            "psum_scatter": lambda v: lax.psum_scatter(v, axis, tiled=True),
            "all_gather": lambda v: lax.all_gather(v, axis, tiled=True),
            "all_to_all": lambda v: lax.all_to_all(v, axis, 0, 0, tiled=True),
            "ppermute": lambda v: lax.ppermute(v, axis, shift),
            "partial_ppermute": lambda v: lax.ppermute(v, axis, half),
            "pshuffle": lambda v: lax.pshuffle(v, axis, [(i + 5) % n for i in range(n)]),
        }

    checked = 0
    for shape, names, axis in (((8,), ("x",), "x"), ((2, 4), ("a", "b"), ("a", "b")),
                               ((2, 4), ("a", "b"), "b")):
        mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(shape), names)
        n = int(np.prod([mesh.shape[a] for a in ((axis,) if isinstance(axis, str) else axis)]))
        spec = P(names)
        x = jnp.asarray(np.random.default_rng(7).integers(-50, 50, (8 * 16, 3)), jnp.float32)
        for name in cases(ours, axis, n):
            run = lambda lax: jax.jit(jax.shard_map(cases(lax, axis, n)[name], mesh=mesh,
                                                    in_specs=spec, out_specs=spec))(x)
            np.testing.assert_array_equal(np.asarray(run(ours)), np.asarray(run(theirs)),
                                          err_msg=f"{name} over {axis} of {shape}")
            checked += 1
    print("CHECKED", checked, "on", len(jax.devices()), "devices")
""")


def test_the_lax_surface_on_eight_devices_of_one_process():
    """1 x 8: jax_jaccl.lax against jax.lax on a mesh of 8, a 2 x 4 mesh over both axes (a
    tuple) and over its inner axis, every collective name. Every order of a tuple of axes is
    checked on 4 devices of one process (tests/in_process/test_axis_orders.py: 2 x 2, 2 x 2 x
    1) and on the 8 devices of a 2 x 4 and a 2 x 2 x 2 mesh over 2 processes of 4, groups
    inside a process among them (tests/plugin/test_axis_orders_as_jobs.py)."""
    done = subprocess.run([sys.executable, "-c", EIGHT_DEVICES], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, JACCL_TIMEOUT="30"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CHECKED 30 on 8 devices" in done.stdout, done.stdout + done.stderr[-2000:]


SHUTDOWN = textwrap.dedent("""
    import os
    import jax, numpy as np
    jax.config.update("jax_num_cpu_devices", 4)
    from jax.sharding import PartitionSpec as P
    import jax_jaccl as jaccl
    names = lambda: {n for n in os.listdir("/dev/shm") if n.startswith("jaccl")}  # noqa: E731
    before = names()  # other jobs' (the suite may run beside others)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("x",))
    program = lambda: jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x"), mesh=mesh,
                                            in_specs=P("x"), out_specs=P("x")))
    x = np.arange(8.0, dtype=np.float32)
    compiled = program().lower(x).compile()  # an executable: jax cannot lower it again
    print("BEFORE", np.asarray(compiled(x)).tolist(), jaccl.is_initialized())
    jaccl.shutdown()
    print("AFTER", jaccl.is_initialized(), sorted(names() - before))
    try:
        compiled(x).block_until_ready()
    except Exception as e:
        print("RAISED", str(e).splitlines()[0])
    print("AGAIN", np.asarray(program()(x + 1)).tolist(), jaccl.is_initialized())
""")


def test_shutdown_releases_the_engine_and_a_new_program_starts_it_again():
    done = subprocess.run([sys.executable, "-c", SHUTDOWN], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, JACCL_TIMEOUT="10"))
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "BEFORE [12.0, 16.0, 12.0, 16.0, 12.0, 16.0, 12.0, 16.0] True" in out, out
    assert "AFTER False []" in out, out
    assert "RAISED" in out and "the engine was shut down (jax_jaccl.shutdown())" in out, out
    assert "AGAIN [16.0, 20.0, 16.0, 20.0, 16.0, 20.0, 16.0, 20.0] True" in out, out


FIRST_USE_WHILE_TRACING = textwrap.dedent("""
    import jax, jax.numpy as jnp, numpy as np
    jax.config.update("jax_num_cpu_devices", 2)
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jax_jaccl as jaccl
    mesh = jax.make_mesh((2,), ("d",))
    traces = []

    def step(x):                       # jaccl's ops are first looked up here, while tracing
        traces.append(1)
        x = jaccl.reduce_scatter(jaccl.all_gather(x, "d", tiled=True), "d", tiled=True)
        return jaccl.lax.psum(x, "d") + jaccl.all_reduce(x, "d")

    f = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=P("d"), out_specs=P("d")))
    x = jax.make_array_from_callback((8,), NamedSharding(mesh, P("d")),
                                     lambda i: np.arange(8.0, dtype=np.float32)[i])
    for _ in range(3):
        x = f(x)
    print("TRACES", len(traces), np.asarray(x).tolist())
""")


def test_a_step_that_first_meets_jaccl_while_tracing_is_traced_once():
    """Importing an op's module must not change JAX's tracing context (jax.extend's import
    adds configuration options on jax 0.12), or the user's step is traced and compiled again at
    its second call."""
    done = subprocess.run([sys.executable, "-c", FIRST_USE_WHILE_TRACING], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "TRACES 1 " in done.stdout, done.stdout


def test_the_worked_ragged_all_to_all_example_in_docs_runs_as_written():
    """docs/moe.md's MoE offsets for ragged_all_to_all, copied out of the page: it prints what
    the page says it prints."""
    page = (pathlib.Path(__file__).parents[2] / "docs" / "moe.md").read_text()
    section = page.split("## Writing an MoE layer with ragged_all_to_all", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("outputs [[1.0, 11.0, 12.0, 2.0, 3.0, 0.0, 0.0, 0.0], [13.0, 4.0, 14.0, 0.0, 0.0, "
            "0.0, 0.0, 0.0]]") in done.stdout, done.stdout
    assert ("group sizes [[3, 2], [1, 2]] output_offsets [[0, 3, 0, 1], [1, 5, 0, 2]] "
            "recv_sizes [[1, 2, 2, 0], [0, 1, 1, 1]]") in done.stdout, done.stdout
