"""Random shard_map programs of jax.lax collectives, drawn from a seed, to run with jax.lax and
with jax_jaccl.lax and compare: the combinations no hand-written table lists.

Contract: draw(seed, devices) is a Program, the same for the same seed and number of devices:
a mesh of 1-3 axes over the devices in a drawn order, a tuple of its axes in a drawn order
(or one axis by name), one of jax.lax's collectives with drawn arguments (tiled or not, any
axis, split and concat axes, partial permutations, axis_index_groups in groups of a drawn
size and member order), a dtype, a shape whose sizes fit the group or not, float values with
-0, NaN and infinities in them, inside a jitted shard_map with check_vma on or off, plain,
under jax.vmap, under jax.grad (float types), or with axis_index_groups, half the float ones
with every operand and the result computed (multiplied by a drawn scale). A third of the
programs chain one or two more collectives after the first (under vmap, inside it; with
axis_index_groups, the later ones over whole axes), each over its own drawn axes and fitted
to the shape the one before it leaves (under vmap, the shape each call sees), so that values
move from varying to invariant over some axes and back (check_vma's types in sequence), as in
a training step's sharded layers. outcome(program, L) runs it with `L` (jax.lax or
jax_jaccl.lax) and gives ("ok", result) or ("raised", the exception); the result is every
device's block this process holds, {its index in the global result (a tuple of (start,
stop)): values}, so that a job of several processes gives each its own and one process all of
them. Invalid programs are drawn on purpose: both modules must
refuse them. mismatch(program, L) runs it with jax.lax and with `L` in this process and says
whether jax.lax answered and how the answers differ ("" where they agree, or both refuse)."""

from __future__ import annotations

import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from util import assert_equal

OPS = ("psum", "pmean", "pmax", "pmin", "all_gather", "all_to_all", "psum_scatter", "ppermute",
       "pshuffle", "pswapaxes")
DTYPES = (np.float32, jnp.bfloat16, np.float16, np.float64, np.int32, np.int8, np.uint8,
          np.uint32, np.int64, np.bool_, np.complex64)
WIDE = (np.float64, np.int64)  # need jax_enable_x64
GROUPED = ("psum", "pmean", "pmax", "pmin", "all_gather", "psum_scatter", "all_to_all")
MESHES = {4: [(4,), (2, 2), (1, 4), (4, 1), (2, 1, 2)], 8: [(8,), (2, 4), (4, 2), (2, 2, 2)]}
# Where jax.lax fails inside jax and jaccl answers: jax.lax.all_to_all's transpose over an axis
# of size 1 with split_axis != concat_axis ("Expected cotangent type bfloat16[2,1,3,1] but got
# bfloat16[2,3,1,1]"); jaccl's gradient is the all_to_all back, as for any other size. And
# jax.lax.psum_scatter (tiled=False) under jax.vmap whose batch dimension lies past the
# scattered one: jax's batching rule puts the output's batch dimension past its rank ("tuple
# index out of range" in batching); jaccl's answer is jax.lax's psum_scatter of the whole
# block with the dimensions moved (checked by hand, 2026-12-05).
JAX_FAILURES = ("Expected cotangent type", "tuple index out of range")


@dataclasses.dataclass
class Step:
    """One collective of a program."""
    op: str
    axis_name: object  # a name, or a tuple of names in the drawn order
    kwargs: dict
    groups: list | None = None

    def __str__(self):
        groups = "" if self.groups is None else f", groups={self.groups}"
        return f"{self.op}(axis_name={self.axis_name!r}, {self.kwargs}{groups})"


@dataclasses.dataclass
class Program:
    seed: int
    mesh: Mesh
    steps: list  # of Step, applied in turn
    dtype: object
    mode: str  # plain, vmap, grad, groups
    check_vma: bool
    x: np.ndarray
    # floats: each collective's operand, and the chain's result, multiplied by it first (a
    # value computed in the program, as a training step's are: XLA may keep it unrounded)
    scale: float | None = None

    def __str__(self):
        scaled = "" if self.scale is None else f" x {self.scale} around each"
        return (f"seed {self.seed}: {' then '.join(map(str, self.steps))}{scaled} of "
                f"{np.dtype(self.dtype).name}{list(self.x.shape)} on mesh "
                f"{dict(self.mesh.shape)} ({self.mode}, check_vma={self.check_vma})")


def values(rng, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, int(info.max) + 1, shape, dtype=np.int64).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    v = rng.normal(size=shape).astype(np.float32)
    if rng.random() < 0.5:  # float edges in a share of the elements
        u = rng.random(shape)
        for lo, hi, edge in ((0, .05, -0.0), (.05, .08, np.nan), (.08, .1, np.inf),
                             (.1, .12, -np.inf), (.12, .14, 0.0)):
            v = np.where((u >= lo) & (u < hi), edge, v)
    return v.astype(dtype)


def _arguments(rng, op, rank, n, dims):
    """The op's keyword arguments, and the input's dims fitted to them (mostly)."""
    if op == "all_gather":
        kwargs = dict(axis=int(rng.integers(-rank, rank + 1)) if rng.random() < 0.5 else 0,
                      tiled=bool(rng.random() < 0.5))
        if kwargs["tiled"] and kwargs["axis"] == rank:
            kwargs["axis"] = 0
        return kwargs
    if op == "all_to_all":
        kwargs = dict(split_axis=int(rng.integers(0, rank)), concat_axis=int(rng.integers(0, rank)),
                      tiled=bool(rng.random() < 0.5))
        if not kwargs["tiled"]:
            dims[kwargs["split_axis"]] = n
        elif rng.random() < 0.9:
            dims[kwargs["split_axis"]] = n * int(rng.integers(1, 3))
        return kwargs
    if op == "pswapaxes":
        kwargs = dict(axis=int(rng.integers(0, rank)))
        dims[kwargs["axis"]] = n
        return kwargs
    if op == "psum_scatter":
        kwargs = dict(scatter_dimension=int(rng.integers(0, rank)), tiled=bool(rng.random() < 0.5))
        dim = kwargs["scatter_dimension"]
        dims[dim] = n * int(rng.integers(1, 3)) if kwargs["tiled"] else n
        if rng.random() < 0.1:
            dims[dim] += 1  # does not split: refused
        return kwargs
    if op == "ppermute":
        sources, destinations = rng.permutation(n), rng.permutation(n)
        pairs = int(rng.integers(0, n + 1))
        return dict(perm=[(int(s), int(d)) for s, d in zip(sources[:pairs], destinations[:pairs])])
    if op == "pshuffle":
        return dict(perm=[int(p) for p in rng.permutation(n)])
    return {}


def _fitted(rng, op, dims, n):
    """The keyword arguments of `op` over a group of `n` for a block of shape `dims` (a later
    step's, which cannot be fitted to them), or None where none fit."""
    rank = len(dims)
    if op == "all_gather":
        tiled = bool(rng.random() < 0.5)
        return dict(axis=int(rng.integers(0, rank if tiled else rank + 1)), tiled=tiled)
    if op in ("psum_scatter", "all_to_all", "pswapaxes"):
        tiled = bool(rng.random() < 0.5) and op != "pswapaxes"
        fit = [k for k in range(rank) if (dims[k] % n == 0 if tiled else dims[k] == n)]
        if not fit:
            return None
        k = int(rng.choice(fit))
        if op == "psum_scatter":
            return dict(scatter_dimension=k, tiled=tiled)
        if op == "pswapaxes":
            return dict(axis=k)
        return dict(split_axis=k, concat_axis=int(rng.integers(0, rank)), tiled=tiled)
    return _arguments(rng, op, rank, n, list(dims))  # the others take any shape


def _block_shape(mesh, steps, dtype, check_vma, shape, mode):
    """The shape of the block each call of a step after `steps` (jax.lax's) sees on a device
    (under vmap: without the mapped dimension), or None where they fail."""
    spec = P(tuple(mesh.axis_names))
    wide = jax.enable_x64(True) if dtype in WIDE else contextlib.nullcontext()
    mapped = mode == "vmap" and len(shape) >= 2
    try:
        with wide:
            out = jax.eval_shape(jax.shard_map(_mapped(_chain(steps, jax.lax), mode), mesh=mesh,
                                               in_specs=spec, out_specs=spec, check_vma=check_vma),
                                 jax.ShapeDtypeStruct(shape, dtype))
    except Exception:  # noqa: BLE001 - an invalid program: nothing to chain to it
        return None
    if len(out.shape) < (3 if mapped else 1):  # under vmap: a call's block of rank 1 or more
        return None
    dims = [out.shape[0] // mesh.devices.size, *out.shape[1:]]
    return dims[:1] + dims[2:] if mapped else dims


def _chained(rng, mesh, steps, dtype, mode, check_vma, shape) -> list:
    """`steps` and one or two more collectives after them, each fitted to the block the one
    before leaves, while jax.lax accepts the program so far."""
    names = mesh.axis_names
    for _ in range(int(rng.integers(1, 3))):
        dims = _block_shape(mesh, steps, dtype, check_vma, shape, mode)
        if dims is None:
            break
        axes = tuple(str(a) for a in rng.permutation(names)[:rng.integers(1, len(names) + 1)])
        n = int(np.prod([mesh.shape[a] for a in axes]))
        ops = [o for o in OPS if not (mode == "grad" and o in ("pmax", "pmin"))]
        op = str(rng.choice(ops))
        kwargs = _fitted(rng, op, dims, n)
        if kwargs is None:
            break
        steps = steps + [Step(op, axes[0] if len(axes) == 1 and rng.random() < 0.3 else axes,
                              kwargs)]
    return steps


def draw(seed: int, devices, one_order: bool = False) -> Program:
    """`one_order`: the mesh lists the devices in their own order and no program takes
    axis_index_groups, so that each collective's groups are new to every process or known to
    every one (XLA's MPI path makes its communicators per process, lazily:
    docs/xla-collectives.md)."""
    rng = np.random.default_rng(seed)
    shapes = MESHES[len(devices)]
    mesh_shape = shapes[rng.integers(len(shapes))]
    names = ("a", "b", "c")[:len(mesh_shape)]
    order = rng.permutation(len(devices)) if rng.random() < 0.5 else np.arange(len(devices))
    if one_order:
        order = np.arange(len(devices))
    mesh = Mesh(np.array(devices)[order].reshape(mesh_shape), names)
    axes = tuple(str(a) for a in rng.permutation(names)[:rng.integers(1, len(names) + 1)])
    axis_name = axes[0] if len(axes) == 1 and rng.random() < 0.3 else axes
    n = int(np.prod([mesh.shape[a] for a in axes]))
    dtype = DTYPES[rng.integers(len(DTYPES))]
    op = str(rng.choice(OPS))
    if op in ("pmax", "pmin") and np.dtype(dtype).kind == "c":
        dtype = np.float32  # jax.lax has no order on complex numbers
    rank = int(rng.integers(1, 4))
    dims = [int(rng.choice([1, 2, 3, 5, 7, n, 2 * n, 3 * n])) for _ in range(rank)]
    kwargs = _arguments(rng, op, rank, n, dims)
    check_vma = bool(rng.random() < 0.5)
    mode = str(rng.choice(["plain", "plain", "vmap", "grad", "groups"]))
    groups = None
    if mode == "groups" and (op not in GROUPED or n < 2 or one_order):
        mode = "plain"
    elif mode == "groups":
        check_vma = False  # jax.lax takes axis_index_groups there
        sizes = [d for d in range(1, n) if n % d == 0]
        size = int(rng.choice(sizes))
        members = [int(m) for m in rng.permutation(n)]
        groups = [members[i:i + size] for i in range(0, n, size)]
        groups = [sorted(g) if rng.random() < 0.5 else g for g in groups]
    floating = np.issubdtype(np.dtype(dtype), np.floating) or dtype == jnp.bfloat16
    if mode == "grad" and (not floating or op in ("pmax", "pmin")):
        mode = "plain"
    x = values(rng, [dims[0] * mesh.devices.size] + dims[1:], dtype)
    steps = [Step(op, axis_name, kwargs, groups)]
    if rng.random() < 1 / 3:
        steps = _chained(rng, mesh, steps, dtype, mode, check_vma, x.shape)
    # drawn last, so that the rest of each seed's program is what it was before it existed
    scale = float(rng.choice([1.1, 0.3])) if floating and rng.random() < 0.5 else None
    return Program(seed, mesh, steps, dtype, mode, check_vma, x, scale)


def _apply(step: Step, L, v):
    f = getattr(L, step.op)
    grouped = {} if step.groups is None else {"axis_index_groups": step.groups}
    if step.op in ("ppermute", "pshuffle"):
        return f(v, step.axis_name, step.kwargs["perm"])
    if step.op == "all_to_all":
        return f(v, step.axis_name, step.kwargs["split_axis"], step.kwargs["concat_axis"],
                 tiled=step.kwargs["tiled"], **grouped)
    if step.op == "pswapaxes":
        return f(v, step.axis_name, step.kwargs["axis"])
    return f(v, step.axis_name, **step.kwargs, **grouped)


def _chain(steps, L, scale=None):
    def collectives(v):
        for step in steps:
            v = _apply(step, L, v if scale is None else v * scale)
        return v if scale is None else v * scale
    return collectives


def _mapped(collective, mode):
    if mode == "vmap":  # over the second dimension, where there is one
        return lambda v: jax.vmap(collective, in_axes=1, out_axes=1)(v) if v.ndim >= 2 else collective(v)
    return collective


def _body(p: Program, L):
    collective = _chain(p.steps, L, p.scale)
    if p.mode == "grad":
        return jax.grad(lambda v: (collective(v).astype(np.float32) * np.float32(1.5)).sum())
    return _mapped(collective, p.mode)


def outcome(p: Program, L):
    spec = P(tuple(p.mesh.axis_names))
    wide = jax.enable_x64(True) if p.dtype in WIDE else contextlib.nullcontext()
    try:
        with wide:
            f = jax.jit(jax.shard_map(_body(p, L), mesh=p.mesh, in_specs=spec, out_specs=spec,
                                      check_vma=p.check_vma))
            x = jax.make_array_from_callback(p.x.shape, NamedSharding(p.mesh, spec),
                                             lambda index: p.x[index])
            y = f(x)
            return "ok", {tuple(sl.indices(n)[:2] for sl, n in zip(s.index, y.shape)):
                          np.asarray(s.data) for s in y.addressable_shards}
    except Exception as e:  # noqa: BLE001 (jax's own errors are of many kinds)
        return "raised", e


def mismatch(p: Program, L) -> tuple[bool, str]:
    """(whether jax.lax answers `p`, how `L`'s answer differs from it in this process): "" where
    they agree (or both refuse it, or jax.lax fails inside jax: JAX_FAILURES)."""
    want, got = outcome(p, jax.lax), outcome(p, L)
    if want[0] == "raised":
        if got[0] == "ok" and not any(k in str(want[1]) for k in JAX_FAILURES):
            return False, f"{p}: jax.lax raised {want[1]!r}, jaccl answered"
        return False, ""
    if got[0] == "raised":
        return True, f"{p}: jax.lax answered, jaccl raised {got[1]!r}"
    if got[1].keys() != want[1].keys():
        return True, f"{p}: blocks {sorted(got[1])} where jax.lax's are {sorted(want[1])}"
    for block in want[1]:
        try:
            assert_equal(got[1][block], want[1][block], err_msg=f"{p}, block {block}")
        except AssertionError as e:
            return True, str(e).splitlines()[0][:600]
    return True, ""
