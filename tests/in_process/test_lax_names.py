"""jax_jaccl.lax against jax.lax, one process x 4 devices: the same program written once with
`L` standing for either module, run with each, results equal bit for bit. Every collective
name, across dtypes (bool, integers, 16-bit floats, complex), shapes, one axis and a tuple of
axes, axis_index_groups where jax.lax takes it (and refused where it refuses), collectives
over jax.vmap axes, constants, autodiff and vmap of ppermute."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jax_jaccl as jaccl
from jax_jaccl import lax as jlax

from util import N, assert_equal, dtype_id, exact_data, mesh1d, mesh2d, put

DTYPES = [np.float32, jnp.bfloat16, np.float16, np.int32, np.uint8, np.bool_, np.complex64]


def run(program, x, mesh=None, spec=P("x"), check_vma=True):
    """program(L, local_x) under shard_map with L = jax.lax and L = jax_jaccl.lax."""
    mesh = mesh or mesh1d()
    x = jax.device_put(x, NamedSharding(mesh, spec))
    results = []
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v, m=module: program(m, v), mesh=mesh, in_specs=spec,
                          out_specs=spec, check_vma=check_vma)
        results.append(jax.jit(f)(x))
    return results


def data(dtype, shape, seed=0):
    x = exact_data(shape, dtype, seed=seed)
    if np.dtype(dtype) == np.complex64:
        x = x + 1j * exact_data(shape, np.float32, seed=seed + 1)
    return x.astype(dtype)


def reductions(dtype):
    if np.dtype(dtype) == np.complex64:
        return ["psum", "pmean"]
    return ["psum", "pmean", "pmax", "pmin"]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reductions(dtype):
    for name in reductions(dtype):
        want, got = run(lambda L, v: getattr(L, name)(v, "x"), data(dtype, (N * 6, 3)))
        assert_equal(got, want, err_msg=name)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_moving_collectives(dtype):
    programs = {
        "all_gather": lambda L, v: L.all_gather(v, "x"),
        "all_gather tiled axis 1": lambda L, v: L.all_gather(v, "x", axis=1, tiled=True),
        "all_to_all": lambda L, v: L.all_to_all(v, "x", 0, 0, tiled=True),
        "all_to_all 1->0 untiled": lambda L, v: L.all_to_all(v.reshape(2, N, 3), "x", 1, 0)
        .reshape(8, 3),
        "pswapaxes": lambda L, v: L.pswapaxes(v.reshape(N, 2, 3), "x", 0).reshape(8, 3),
        "ppermute shift": lambda L, v: L.ppermute(v, "x", [(i, (i + 1) % N) for i in range(N)]),
        "ppermute partial": lambda L, v: L.ppermute(v, "x", [(0, 2), (3, 1)]),
        "ppermute identity": lambda L, v: L.ppermute(v, "x", [(i, i) for i in range(N)]),
        "ppermute none": lambda L, v: L.ppermute(v, "x", []),
        "pshuffle": lambda L, v: L.pshuffle(v, "x", [2, 0, 3, 1]),
        # jax.lax.pbroadcast has no CPU lowering: its definition, member 2's value everywhere
        "pbroadcast": lambda L, v: L.pbroadcast(v, "x", 2) if L is jlax
        else jax.lax.all_gather(v, "x")[2],
    }
    if np.dtype(dtype) != np.bool_:
        programs["psum_scatter tiled"] = lambda L, v: L.psum_scatter(v, "x", tiled=True)
        programs["psum_scatter dim 1"] = lambda L, v: L.psum_scatter(
            jnp.concatenate([v + k for k in range(N)], axis=1), "x", scatter_dimension=1,
            tiled=True)  # N different blocks: which one each device gets shows
    for name, program in programs.items():
        want, got = run(program, data(dtype, (N * 8, 3), seed=2))
        assert_equal(got, want, err_msg=name)


def test_a_tuple_of_axes_and_one_axis_of_two():
    x = data(np.float32, (N * 4, 2), seed=4)
    spec = P(("a", "b"))
    programs = {
        "psum over both": lambda L, v: L.psum(v, ("a", "b")),
        "pmax over b": lambda L, v: L.pmax(v, "b"),
        "all_gather over both": lambda L, v: L.all_gather(v, ("a", "b"), tiled=True),
        "psum_scatter over a": lambda L, v: L.psum_scatter(v, "a", tiled=True),
        "all_to_all over both": lambda L, v: L.all_to_all(v, ("a", "b"), 0, 0, tiled=True),
        "ppermute over both": lambda L, v: L.ppermute(v, ("a", "b"), [(0, 3), (3, 1), (1, 0)]),
        "ppermute over b": lambda L, v: L.ppermute(v, "b", [(0, 1), (1, 0)]),
    }
    for name, program in programs.items():
        want, got = run(program, x, mesh2d(), spec)
        assert_equal(got, want, err_msg=name)


def test_axis_index_groups_where_jax_lax_takes_them():
    groups = [[0, 2], [3, 1]]
    x = data(np.float32, (N * 4, 2), seed=5)
    programs = {
        "pmax": lambda L, v: L.pmax(v, "x", axis_index_groups=groups),
        "pmin": lambda L, v: L.pmin(v, "x", axis_index_groups=groups),
        "all_gather": lambda L, v: L.all_gather(v, "x", axis_index_groups=groups, tiled=True),
        "all_gather untiled": lambda L, v: L.all_gather(v, "x", axis_index_groups=groups),
        "psum_scatter": lambda L, v: L.psum_scatter(v, "x", axis_index_groups=groups,
                                                    tiled=True),
        "pswapaxes": lambda L, v: L.pswapaxes(v.reshape(2, -1, 2), "x", 0,
                                              axis_index_groups=groups),
        "all_to_all": lambda L, v: L.all_to_all(v, "x", 0, 0, axis_index_groups=groups,
                                               tiled=True),
    }
    for name, program in programs.items():
        want, got = run(program, x)
        assert_equal(got, want, err_msg=name)


GROUPS = {"even": [[0, 2], [3, 1]], "uneven": [[0, 1, 3], [2]], "one of all": [[3, 0, 2, 1]]}


@pytest.mark.parametrize("groups", GROUPS.values(), ids=GROUPS.keys())
def test_axis_index_groups_of_sums_under_pmap(groups):
    """jax.pmap takes axis_index_groups in psum and pmean, uneven ones too (a constant's psum
    is then the first group's size, jax.lax's rule)."""
    x = data(np.float32, (N, 3), seed=9)
    programs = {
        "psum": lambda L, v: v - L.psum(v, "i", axis_index_groups=groups),
        "pmean": lambda L, v: L.pmean(v, "i", axis_index_groups=groups),
        "psum of a constant": lambda L, v: v - L.psum(2.0, "i", axis_index_groups=groups),
        "pmax": lambda L, v: L.pmax(v, "i", axis_index_groups=groups),
        "psum of bool": lambda L, v: L.psum(v > 0, "i", axis_index_groups=groups),
    }
    for name, program in programs.items():
        want, got = (jax.pmap(lambda v, L=L: program(L, v), "i")(x) for L in (jax.lax, jlax))
        assert_equal(got, want, err_msg=name)


def test_axis_index_groups_of_sums_in_shard_map_without_check_vma():
    x = data(np.float32, (N * 2, 3), seed=10)
    for groups in GROUPS.values():
        want, got = run(lambda L, v: L.psum(v, "x", axis_index_groups=groups)
                        + L.pmean(v, "x", axis_index_groups=groups), x, check_vma=False)
        assert_equal(got, want, err_msg=str(groups))


def test_uneven_groups_of_a_reduction_are_groups_on_the_engine():
    """jaccl.all_reduce over groups of 3 and 1 members: every member's sum, numpy's."""
    x = data(np.int32, (N, 5), seed=11)
    got = jax.jit(jax.shard_map(lambda v: jaccl.all_reduce(v, "x", axis_index_groups=[[2, 0, 3], [1]]),
                                mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"),
                                check_vma=False))(put(x, mesh1d()))
    group = x[[0, 2, 3]].sum(0, dtype=np.int32)
    want = np.stack([group, x[1], group, group])
    assert_equal(np.asarray(got), want)


@pytest.mark.parametrize("name", ["psum", "pmean"])
def test_axis_index_groups_where_jax_lax_refuses_them(name):
    """Inside a shard_map that checks what varies (check_vma=True, the default)."""
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v: getattr(module, name)(v, "x", axis_index_groups=[[0, 1], [2, 3]]),
                          mesh=mesh1d(), in_specs=P("x"), out_specs=P("x"))
        with pytest.raises(NotImplementedError):
            jax.jit(f).lower(put(np.zeros(N, np.float32), mesh1d()))


def test_collectives_over_a_vmap_axis_inside_shard_map():
    """jax.vmap(axis_name="i") inside the shard_map body: over "i" alone the result is
    jax.lax's computation on the batch; psum over ("i", "x") reduces both. check_vma=False:
    with it, jax.lax's own collectives over a vmap axis fail inside shard_map (an
    AssertionError in jax 0.10.2), and jaccl's do too, since they are jax.lax's there."""
    x = data(np.float32, (N * 4, 6), seed=6)

    def batched(collective):
        return lambda L, v: jax.vmap(lambda row: collective(L, row), axis_name="i")(v)

    programs = {
        "psum i": batched(lambda L, r: L.psum(r, "i")),
        "pmean i": batched(lambda L, r: L.pmean(r, "i")),
        "pmax i": batched(lambda L, r: L.pmax(r, "i")),
        "all_gather i": batched(lambda L, r: L.all_gather(r, "i")[0]),
        "ppermute i": batched(lambda L, r: L.ppermute(r, "i", [(0, 1), (1, 2), (2, 3), (3, 0)])),
        "psum i and x": batched(lambda L, r: L.psum(r, ("i", "x"))),
        "pmax x inside vmap": batched(lambda L, r: L.pmax(r, "x")),
    }
    for name, program in programs.items():
        want, got = run(program, x, check_vma=False)
        assert_equal(got, want, err_msg=name)


def test_collectives_over_a_vmap_axis_outside_shard_map():
    x = data(np.float32, (N, 5), seed=8)
    for name in ("psum", "pmean", "pmax", "pmin"):
        want, got = (jax.vmap(lambda r, m=m: getattr(m, name)(r, "i"), axis_name="i")(x)
                     for m in (jax.lax, jlax))
        assert_equal(got, want, err_msg=name)
    want, got = (jax.vmap(lambda r, m=m: m.all_gather(r, "i", tiled=True), axis_name="i")(x)
                 for m in (jax.lax, jlax))
    assert_equal(got, want)


def test_constants_are_reduced_as_jax_lax_reduces_them():
    def program(L, v):
        n = L.psum(1, "x")
        assert isinstance(n, int) and n == N
        return v * n + L.pmean(2.0, "x") + L.psum(jnp.float32(1.5), "x")
    want, got = run(program, data(np.float32, (N,)))
    assert_equal(got, want)


def test_jaccl_in_jax_laxs_place(monkeypatch):
    """A program (or another project's test suite) run with jax_jaccl.lax's functions put in
    jax.lax's place: jaccl's fallbacks to jax.lax's own op (constants, jax.vmap axes, the
    ppermute perm check) call jax's, not themselves again, and give jax.lax's results."""
    x = data(np.float32, (N * 4, 6), seed=8)
    programs = {
        "constants": lambda L, v: v * L.psum(1, "x") + L.pmean(2.0, "x"),
        "vmap axis": lambda L, v: jax.vmap(lambda r: L.psum(r, "i") + L.pmax(r, "i")
                                           + L.all_gather(r, "i")[1], axis_name="i")(v),
        "mesh axis": lambda L, v: L.psum(v, "x") + L.ppermute(v, "x", [(0, 1), (1, 0)]),
    }
    want = {name: run(program, x, check_vma=False)[0] for name, program in programs.items()}
    for name in jlax.__all__:
        monkeypatch.setattr(jax.lax, name, getattr(jlax, name))
    for name, program in programs.items():
        got = run(program, x, check_vma=False)
        assert_equal(got[0], want[name], err_msg=name)
        assert_equal(got[1], want[name], err_msg=name)
    with pytest.raises(TypeError, match="must be a list or a tuple") if \
            jaccl._compat.ppermute_takes_only_sequences() else contextlib.nullcontext():
        run(lambda L, v: L.ppermute(v, "x", iter([(0, 1)])), x)


def test_bool_and_integer_types_follow_jax_lax():
    want, got = run(lambda L, v: L.psum(v, "x").astype(jnp.float32)
                    + L.pmean(v.astype(jnp.int32), "x"), data(np.bool_, (N * 5,)))
    assert_equal(got, want)
    assert got.dtype == jnp.float32


def test_ppermute_gradient_and_vmap():
    perm = [(0, 1), (1, 2), (2, 0)]  # member 3 receives nothing
    x = data(np.float32, (N * 3, 2), seed=7)
    want, got = run(lambda L, v: jax.grad(lambda u: jnp.sum(L.ppermute(u * u, "x", perm)
                                                            * jnp.arange(2.0)))(v), x)
    assert_equal(got, want)
    want, got = run(lambda L, v: jax.vmap(lambda r: L.ppermute(r, "x", perm))(v), x)
    assert_equal(got, want)


def test_ppermute_refuses_what_jax_lax_refuses():
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v: module.ppermute(v, "x", [(0, 1), (0, 2)]), mesh=mesh1d(),
                          in_specs=P("x"), out_specs=P("x"))
        with pytest.raises(ValueError, match="sources and destinations must be unique"):
            jax.jit(f).lower(put(np.zeros(N, np.float32), mesh1d()))


@pytest.mark.parametrize("perm", [np.array([[0, 1], [1, 0]]), ((0, 1), (1, 0)), [(0, 1), (1, 0)]],
                         ids=["numpy array", "tuple", "list"])
def test_ppermute_takes_the_perms_jax_lax_takes(perm):
    """jax 0.12's jax.lax.ppermute takes only a list or a tuple of pairs (TypeError otherwise);
    jax 0.10's takes any iterable: jax_jaccl.lax does what the installed jax does."""
    outcomes = []
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v: module.ppermute(v, "x", perm), mesh=mesh1d(),
                          in_specs=P("x"), out_specs=P("x"))
        try:
            outcomes.append(np.asarray(jax.jit(f)(put(np.arange(N, dtype=np.float32), mesh1d()))))
        except TypeError as e:
            outcomes.append(str(e)[str(e).index("Got perm of type"):])
    if isinstance(outcomes[0], str):
        assert outcomes[1] == outcomes[0]
    else:
        assert_equal(outcomes[1], outcomes[0])


def test_the_gradient_of_a_jaccl_program_sums_on_jaccl():
    """Where an invariant value meets a varying one JAX inserts pvary, whose transpose is JAX's
    own psum; inside a shard_map that binds jaccl collectives that psum lowers to jaccl's
    all_reduce: the backward pass has no XLA collective, and the gradient is jax.lax's. A
    shard_map without jaccl keeps XLA's."""
    x = data(np.float32, (N * 2, 3), seed=12)

    def program(L):
        grad = jax.grad(lambda u: jnp.sum(L.pmean(u, "x") * u) + jnp.sum(L.psum(u, "x") ** 2))
        return jax.jit(jax.shard_map(grad, mesh=mesh1d(), in_specs=P("x"), out_specs=P("x")))

    texts = {L: program(L).lower(put(x, mesh1d())).as_text() for L in (jax.lax, jlax)}
    assert "stablehlo.all_reduce" in texts[jax.lax] and "jaccl" not in texts[jax.lax]
    assert "stablehlo.all_reduce" not in texts[jlax]
    assert texts[jlax].count("@jaccl_all_reduce") == 4  # two forward, two for pvary's transpose
    assert_equal(program(jlax)(put(x, mesh1d())), program(jax.lax)(put(x, mesh1d())))


def test_every_name_is_jax_laxs_and_none_is_missing():
    """jax_jaccl.lax offers each of its names only where jax.lax has it (psum_scatter_start:
    jax 0.12; pvary: none of the supported jax), and never a None."""
    for name in jlax.__all__:
        assert getattr(jlax, name) is not None and hasattr(jax.lax, name), name
    assert hasattr(jlax, "psum_scatter_start") == hasattr(jax.lax, "psum_scatter_start")


def test_every_signature_is_jax_laxs():
    """Each name's parameters (names, kinds and defaults; not annotations) are the installed
    jax.lax's. jax.lax.psum_scatter_start is written `(*args, **kwargs)` and hands them to
    psum_scatter's own parameters: it is compared with jax.lax.psum_scatter."""
    import inspect

    def parameters(f):
        return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

    for name in jlax.__all__:
        theirs = getattr(jax.lax, name)
        if name == "psum_scatter_start" and [p[1] for p in parameters(theirs)] == [
                inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
            theirs = jax.lax.psum_scatter
        assert parameters(getattr(jlax, name)) == parameters(theirs), name


@pytest.mark.skipif(not hasattr(jax.lax, "psum_scatter_start"),
                    reason="this jax has no jax.lax.psum_scatter_start (jax 0.12 has)")
def test_psum_scatter_start_and_done():
    x = data(np.float32, (N * 8, 3), seed=13)

    def program(L, v):
        started = L.psum_scatter_start({"a": v, "b": v * 2}, "x", tiled=True)
        meanwhile = jnp.tanh(v).sum()
        return jax.tree.map(lambda f: f.done(), started,
                            is_leaf=lambda f: hasattr(f, "done"))["b"] + meanwhile

    want, got = run(program, x)
    assert_equal(got, want)


@pytest.mark.parametrize("name", ["psum", "pmean", "pmax", "pmin", "psum_scatter"])
def test_a_reduction_over_axes_of_mixed_states_follows_jax_lax(name):
    """After a reduction over "a" the value is invariant over "a" and varying over "b"
    (check_vma's types): a second reduction over ("a", "b") is refused where jax.lax refuses it
    (psum, pmean and psum_scatter; pmax and pmin from jax 0.11.2: before, jax.lax pvaries such
    an input and answers), and computes what jax.lax computes where it takes it."""
    def program(L, v):
        return getattr(L, name)(L.psum(v, "a"), ("a", "b"))

    outcomes = []
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v, m=module: program(m, v), mesh=mesh2d(), in_specs=P(("a", "b")),
                          out_specs=P(("a", "b")))
        try:
            outcomes.append(np.asarray(jax.jit(f)(put(data(np.float32, (N * 4, 2)), mesh2d(),
                                                      P(("a", "b"))))))
        except ValueError as e:
            assert "can only accept axis_name which corresponds to one of" in str(e)
            outcomes.append("refused")
    if isinstance(outcomes[0], str):
        assert outcomes[1] == "refused"
    else:
        assert_equal(outcomes[1], outcomes[0])
    assert name not in ("psum", "pmean", "psum_scatter") or outcomes[0] == "refused"


def test_an_unbound_axis_raises_what_jax_lax_raises():
    """Inside shard_map jax.lax raises a bare AssertionError for an axis no shard_map binds;
    jaccl's error is one too (and a NameError, as outside, and a ValueError), naming it."""
    for module in (jax.lax, jlax):
        f = jax.shard_map(lambda v: module.psum(v, "y"), mesh=mesh1d(), in_specs=P("x"),
                          out_specs=P("x"))
        with pytest.raises(AssertionError) as raised:
            jax.jit(f).lower(put(np.zeros(N, np.float32), mesh1d()))
    assert isinstance(raised.value, (NameError, ValueError)) and "'y'" in str(raised.value)
