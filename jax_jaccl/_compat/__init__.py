"""The jax internals jax_jaccl needs, in one place, with fallbacks across versions.

Contract: everything here works on jax>=0.10; no module of jax_jaccl outside this package
imports jax._src (tests/in_process/test_layout.py), and when jax moves an internal, only this
package changes. INTERNALS names every internal it reads, for the test that says which one a
new jax removed (tests/in_process/test_jax_internals.py). manual_region.py holds the MLIR of
partly manual regions; jaccl-run's cluster environment (_cluster.py) waits for
jax._src.clusters by name at interpreter start-up, before jax can be imported.
"""

from __future__ import annotations

import functools
import re
import threading

import jax
import jax.core
import jax.interpreters.mlir
from jax._src import core as _core
from jax._src import effects

# (module, attribute) of every jax internal read here and in manual_region.py; optional ones
# (read with a fallback where an older or newer jax lacks them) are in OPTIONAL_INTERNALS.
# docs/layout.md ("jax internals") says why each is read and whether a public name serves;
# what has one on every supported jax (jax.core.Tracer, jax.interpreters.mlir's TokenSet,
# SPMDAxisContext, register_lowering, ir) is read there instead.
INTERNALS = (
    ("jax._src.core", "NamedAxisEffect"), ("jax._src.core", "Primitive"),
    ("jax._src.core", "get_axis_env"), ("jax._src.core", "jaxprs_in_params"),
    ("jax._src.core", "abstract_token"), ("jax._src.effects", "Effect"),
    ("jax._src.effects", "ordered_effects"), ("jax._src.effects", "lowerable_effects"),
    ("jax._src.lax.parallel", "pvary"), ("jax._src.lax.parallel", "psum"),
    ("jax._src.lax.parallel", "pmax"), ("jax._src.lax.parallel", "pmin"),
    ("jax._src.lax.parallel", "all_gather"), ("jax._src.lax.parallel", "all_to_all"),
    ("jax._src.lax.parallel", "ppermute"), ("jax._src.lax.parallel", "psum_scatter"),
    ("jax._src.interpreters.mlir", "custom_call"),
    ("jax._src.interpreters.mlir", "create_token"), ("jax._src.interpreters.mlir", "_lowerings"),
    ("jax._src.interpreters.mlir", "get_sharding_attr"),
    ("jax._src.interpreters.mlir", "wrap_with_sharding_op"),
    ("jax._src.sharding_impls", "SdyArrayList"), ("jax._src.config", "use_shardy_partitioner"),
    ("jax._src.shard_map", "shard_map_p"),
    ("jax._src.mesh", "get_concrete_mesh"), ("jax._src.distributed", "global_state"),
    ("jax._src.source_info_util", "user_frames"), ("jax._src.lib", "xla_client"),
    ("jax._src.interpreters.pxla", "__name__"), ("jax.sharding.NamedSharding", "_to_sdy_sharding"),
    ("jax._src.lib._jax", "get_distributed_runtime_client"),
    ("jax._src.lib.mlir.dialects", "sdy"), ("jax._src.lib.mlir.dialects", "hlo"),
    ("jax._src.lib._jax", "get_distributed_runtime_service"), ("jax._src.distributed", "_jax"),
    ("jax._src.compiler", "compile_or_get_cached"),
)
OPTIONAL_INTERNALS = (
    ("jax._src.config", "_check_vma"), ("jax._src.config", "raise_on_ppermute_sort_diff"),
    ("jax._src.lax.parallel", "psum_invariant_p"), ("jax._src.lax.parallel", "_get_from"),
    ("jax._src.lax.parallel", "_maybe_skip_one_sized_axes"),
    ("jax._src.lib._jax", "make_gloo_tcp_collectives"),
    # jax <= 0.12.0's GSPMD partly manual regions (manual_region.py); gone from 0.12.1
    ("jax._src.interpreters.pxla", "manual_proto"),
    ("jax._src.interpreters.mlir", "wrap_with_full_to_shard_op"),
    ("jax._src.interpreters.mlir", "wrap_with_shard_to_full_op"),
)

try:  # jax >= 0.10
    from jax._src.lax import parallel as _parallel
except ImportError:  # pragma: no cover
    _parallel = None

# jax.lax's collectives from the module that defines them (jax.lax re-exports them): jaccl's
# fallbacks to jax.lax's own op (constants, jax.vmap axes, reduced and unreduced values) call
# these, so that a program which puts jax_jaccl.lax's functions in jax.lax's place (as other
# projects' test suites are run on jaccl) does not send those calls back to jaccl.
lax_parallel = _parallel

NamedAxisEffect = _core.NamedAxisEffect
Tracer = jax.core.Tracer
# jax.extend.core.Primitive, without importing jax.extend: on jax 0.12 that import defines new
# configuration options (Pallas's), which changes the tracing context, so every function traced
# before an op's module was first imported (a user's step, when the first jaccl op is met while
# tracing it) would be traced and compiled again at its next call.
Primitive = _core.Primitive


def check_vma_enabled() -> bool:
    """True when shard_map tracks which values vary over which mesh axes (check_vma=True)."""
    from jax._src import config

    flag = getattr(config, "_check_vma", None)
    return bool(flag.value) if flag is not None else False


def varying_axes(aval) -> frozenset:
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return frozenset(mat.varying)
    return frozenset(getattr(aval, "vma", frozenset()))


def reduced_or_unreduced(x, axes) -> bool:
    """True when `x`'s type says it is unreduced (partial sums) or reduced over some of `axes`
    (jax's sharding types): jax.lax's collectives then mean other operations, which jaccl
    leaves to jax.lax."""
    mat = getattr(getattr(x, "aval", None), "mat", None)
    if mat is None:
        return False
    marked = frozenset(getattr(mat, "unreduced", ())) | frozenset(getattr(mat, "reduced", ()))
    return bool(marked & frozenset(axes))


def with_varying(aval, varying: frozenset, **updates):
    """`aval` updated with `updates` (shape, dtype) and the given varying axes."""
    mat = getattr(aval, "mat", None)
    if mat is not None:
        return aval.update(manual_axis_type=mat.update(varying=frozenset(varying)), **updates)
    return aval.update(vma=frozenset(varying), **updates)


def collective_varying(aval, axes) -> frozenset:
    """The varying axes of a collective's output whose inputs vary over `aval`'s axes and
    which makes them vary over `axes` too; empty without check_vma, as for jax.lax."""
    if not check_vma_enabled():
        return frozenset()
    return varying_axes(aval) | frozenset(axes)


def axis_env_sizes() -> dict:
    """Names and sizes of the mesh axes bound where we are tracing (shard_map's manual axes)."""
    env = _core.get_axis_env()
    return dict(env.axis_sizes)


def manual_mesh_axes() -> frozenset:
    """The mesh axes that shard_map has made manual where we are tracing."""
    mesh = jax.sharding.get_abstract_mesh()
    return frozenset(getattr(mesh, "manual_axes", ()) or ())


def tracing_partly_manual() -> bool:
    """True while tracing inside a shard_map that leaves some mesh axes to XLA's partitioner."""
    mesh = jax.sharding.get_abstract_mesh()
    manual = manual_mesh_axes()
    return bool(manual) and manual != frozenset(getattr(mesh, "axis_names", ()))


def make_varying(x, axes: tuple):
    """pvary `x` over those of `axes` it does not already vary over (auto_pcast, as jax.lax does)."""
    if not check_vma_enabled():
        return x
    missing = tuple(a for a in axes if a not in varying_axes(jax.typeof(x)))
    if not missing:
        return x
    return _parallel.pvary(x, missing)


def _calls(fn, name: str, depth: int = 2) -> bool:
    """Whether `fn`, a function of jax._src.lax.parallel, calls `name` (in its own code, its
    nested functions', or those of the module's functions it calls, `depth` levels down)."""
    codes, names = [getattr(fn, "__code__", None)], set()
    while codes:
        code = codes.pop()
        if code is not None:
            names |= set(code.co_names)
            codes += [c for c in code.co_consts if hasattr(c, "co_names")]
    if name in names:
        return True
    return depth > 0 and any(_calls(getattr(_parallel, n), name, depth - 1) for n in names
                             if callable(getattr(_parallel, n, None)) and n.startswith("_"))


@functools.cache
def lax_state_check(name: str):
    """jax.lax.`name`'s refusal of an input that is not in one state over all the axes it
    reduces over (varying over some and invariant over others under check_vma, say), where
    the installed jax makes it (psum and psum_scatter from jax 0.10, pmax and pmin from
    0.11.2): a function (aval, axes) that raises jax.lax's ValueError, or None."""
    get_from = getattr(_parallel, "_get_from", None)
    if get_from is None or not _calls(getattr(_parallel, name), "_get_from"):
        return None
    skip = getattr(_parallel, "_maybe_skip_one_sized_axes", lambda axes: axes)

    def check(aval, axes) -> None:
        axes = skip(tuple(axes))
        if axes and getattr(aval, "mat", None) is not None:
            get_from(aval, axes, f"jax.lax.{name}")
    return check


def ppermute_refuses_axes_out_of_mesh_order():
    """How jax.lax.ppermute (and pshuffle) numbers a group whose tuple of axes is not in the
    mesh's order: None where this jax numbers it in the mesh's order whatever the tuple's
    (jax <= 0.11.1: it sorts each group), else the value of jax's
    `jax_raise_on_ppermute_sort_diff` where the op is lowered (True: it raises; False: it
    numbers in the tuple's order, as axis_index does)."""
    from jax._src import config

    flag = getattr(config, "raise_on_ppermute_sort_diff", None)
    return None if flag is None else bool(flag.value)


@functools.cache
def ppermute_takes_only_sequences() -> bool:
    """Whether the installed jax.lax.ppermute refuses a perm that is not a list or a tuple
    (jax 0.12 raises TypeError; jax 0.10 takes any iterable of pairs): asked of jax.lax itself,
    whose check comes before it looks at the axis."""
    try:
        lax_parallel.ppermute(0.0, "jaccl: no such axis", perm=iter(()))
    except TypeError:
        return True
    except Exception:  # noqa: BLE001 (the unbound axis: no check of perm's type before it)
        return False
    return False


def psum_invariant_primitive():
    """jax.lax.psum's primitive where shard_map checks what varies, which JAX also binds to
    transpose its pvary (a gradient's sum over devices); None where this jax has none."""
    return getattr(_parallel, "psum_invariant_p", None)


def jax_lowering(primitive):
    """jax's own lowering rule of `primitive`, for every platform."""
    from jax._src.interpreters import mlir as _mlir

    return _mlir._lowerings[primitive].rule


def distributed_state():
    """jax.distributed's process-wide state (its coordination-service client, the coordinator's
    address): what jax.distributed.initialize() set up, or empty fields before it."""
    from jax._src import distributed

    return distributed.global_state


def user_frames(traceback):
    """The frames of a JAX source-info traceback outside JAX, innermost first."""
    from jax._src import source_info_util

    return source_info_util.user_frames(traceback)


def jaxlib_extension():
    """jaxlib's extension module (where XLA's gloo collectives are made), or None."""
    try:
        from jax._src.lib import _jax
    except ImportError:
        return None
    return _jax


def abstract_token():
    return _core.abstract_token


def pvary(x, axes: tuple):
    return _parallel.pvary(x, axes)


def ir_type(ctx, aval):
    """The MLIR type of `aval` in lowering context `ctx`."""
    from jax.interpreters import mlir

    try:
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    except TypeError:  # older signature
        return mlir.aval_to_ir_type(aval)


def custom_call(*args, **kwargs):
    """jax's own helper that builds an HLO custom call (not re-exported publicly)."""
    from jax._src.interpreters import mlir as _mlir

    return _mlir.custom_call(*args, **kwargs)


def convert(ctx, value, aval):
    """`value` converted (stablehlo.convert) to the element type of `aval`."""
    from jax._src.lib.mlir.dialects import hlo

    return hlo.convert(ir_type(ctx, aval), value)


def create_token():
    from jax._src.interpreters import mlir as _mlir

    return _mlir.create_token()


def token_set(tokens: dict):
    from jax.interpreters import mlir

    return mlir.TokenSet(tokens)


def partly_manual(ctx) -> bool:
    """True when `ctx` lowers inside a shard_map that is manual over only some of its mesh's
    axes (axis_names=..., or jax.vmap of a shard_map): the other axes stay with XLA's
    partitioner, which needs a sharding on every side-effecting op there."""
    from jax.interpreters import mlir

    axis_context = ctx.module_context.axis_context
    if not isinstance(axis_context, mlir.SPMDAxisContext):
        return False
    return frozenset(axis_context.manual_axes) != frozenset(axis_context.mesh.axis_names)


# Ordered effects whose token XLA cannot carry through a partly manual shard_map, with what to
# tell the user instead (registered by _ordering).
_effects_refused_in_partly_manual: dict = {}


def refuse_in_partly_manual(effect, message: str) -> None:
    _effects_refused_in_partly_manual[effect] = message


def _refuse_tokens_in_partly_manual(mesh, params) -> None:
    manual = frozenset(params.get("newly_manual_axes", ())) | frozenset(
        getattr(mesh, "manual_axes", ()) or ())
    if manual == frozenset(mesh.axis_names):
        return
    for effect, message in _effects_refused_in_partly_manual.items():
        if effect in params["jaxpr"].effects:
            raise ValueError(message)


# The concrete meshes of the shard_maps being lowered on this thread, innermost last, and
# whether each one's body binds a jaccl primitive.
_lowering_meshes = threading.local()


def _binds_jaccl(jaxpr) -> bool:
    """Whether `jaxpr` (a Jaxpr or ClosedJaxpr) or any jaxpr nested in it binds a primitive of
    jaccl's (named jaccl_*)."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for eqn in jaxpr.eqns:
        if eqn.primitive.name.startswith("jaccl_"):
            return True
        if any(_binds_jaccl(sub) for sub in _core.jaxprs_in_params(eqn.params)):
            return True
    return False


def lowering_a_jaccl_shard_map() -> bool:
    """True while the body of a shard_map that binds jaccl collectives is being lowered on
    this thread (the innermost shard_map decides)."""
    flags = getattr(_lowering_meshes, "jaccl", [])
    return bool(flags) and flags[-1]


def _track_shard_map_meshes() -> None:
    """Wraps jax's shard_map lowering so that it records its mesh while its body lowers (a
    nested shard_map, or one given no mesh, carries an abstract mesh, and a jaccl op inside it
    needs the devices of the concrete mesh it stands for), and whether its body binds jaccl
    collectives (lowering_a_jaccl_shard_map). jax's own lowering is unchanged."""
    from jax._src import shard_map as _shard_map
    from jax._src.interpreters import mlir as _mlir

    entry = _mlir._lowerings[_shard_map.shard_map_p]
    if getattr(entry.rule, "_jaccl_tracks_meshes", False):
        return

    def rule(ctx, *args, mesh, **params):
        _refuse_tokens_in_partly_manual(mesh, params)
        concrete = isinstance(mesh, jax.sharding.Mesh)
        stack = _lowering_meshes.__dict__.setdefault("stack", [])
        flags = _lowering_meshes.__dict__.setdefault("jaccl", [])
        if concrete:
            stack.append(mesh)
        flags.append(_binds_jaccl(params["jaxpr"]))
        try:
            return entry.rule(ctx, *args, mesh=mesh, **params)
        finally:
            if concrete:
                stack.pop()
            flags.pop()

    rule._jaccl_tracks_meshes = True
    jax.interpreters.mlir.register_lowering(_shard_map.shard_map_p, rule, inline=entry.inline)


_track_shard_map_meshes()


def concrete_mesh(mesh):
    """`mesh` if it has devices; for an abstract mesh, the innermost shard_map mesh being lowered
    (or jax.set_mesh's) with the same axis names and sizes; None when there is none."""
    if isinstance(mesh, jax.sharding.Mesh):
        return mesh
    from jax._src import mesh as _mesh

    shape = tuple(mesh.shape.items())
    candidates = list(getattr(_lowering_meshes, "stack", []))[::-1] + [_mesh.get_concrete_mesh()]
    for candidate in candidates:
        if not candidate.empty and tuple(candidate.shape.items()) == shape:
            return candidate
    return None


def is_positive_zeros(value) -> bool:
    """True when the MLIR `value` is a constant of +0 everywhere (what jnp.zeros lowers to: a
    splat constant, or a broadcast of a scalar one), so a consumer may make the zeros itself."""
    import math

    from jax.interpreters.mlir import ir

    op = getattr(value, "owner", None)
    name = getattr(op, "name", None)
    if name == "stablehlo.broadcast_in_dim":
        return is_positive_zeros(op.operands[0])
    if name != "stablehlo.constant":
        return False
    try:
        attr = ir.DenseElementsAttr(op.attributes["value"])
        if not attr.is_splat:
            return False
        splat = attr.get_splat_value()
    except (TypeError, ValueError, KeyError, AttributeError):
        return False
    for kind in (ir.FloatAttr, ir.IntegerAttr):
        try:
            v = kind(splat).value
        except (TypeError, ValueError):
            continue
        return v == 0 and math.copysign(1.0, v) > 0
    return False


def sharding_attr(ctx, sharding):
    from jax._src.interpreters import mlir as _mlir

    return _mlir.get_sharding_attr(ctx.module_context, sharding)


def current_block():
    """The MLIR block ops are being emitted into."""
    from jax.interpreters.mlir import ir

    return ir.InsertionPoint.current.block


def start_coordination_service(address: str, num_processes: int, heartbeat_s: float,
                               shutdown_s: float):
    """JAX's coordination service (key-value store, heartbeats, barriers, live devices), the one
    jax.distributed.initialize() starts in process 0, started in this process instead and
    recoverable (a lost process does not end the others): jaccl-run's, so that a job survives
    its process 0. Returns it; its shutdown() stops it. _cluster.py keeps process 0 from
    starting its own (it reads jax._src.distributed's `_jax` by name at start-up)."""
    from jax._src.lib import _jax

    return _jax.get_distributed_runtime_service(address, num_processes,
                                                heartbeat_timeout=int(heartbeat_s),
                                                shutdown_timeout=int(shutdown_s), recoverable=True)


def report_lost(address: str, process: int, timeout_s: float, *, topology_again=False) -> None:
    """Tells the recoverable coordination service at `address` (start_coordination_service's)
    that `process` is gone, as jaccl-run saw it die: a client in its name registers (a new
    incarnation of it, as a process started again would) and disconnects, so that the service
    stops counting it live now, not at its heartbeat timeout. The survivors'
    multihost_utils.live_devices answers without it; a process started again in its place
    registers as usual. `topology_again` (process 0 about to be started again): also removes
    the device topology XLA's CPU client published from it, once for the job (the others read
    it at start-up), which the new process 0 publishes anew (XLA refuses a second: "key
    cpu:global_topology/cpu already exists"). Raises what the client raises (the service
    unreachable)."""
    from jax._src.lib import _jax

    client = _jax.get_distributed_runtime_client(
        address, process, init_timeout=max(1, int(timeout_s)),
        heartbeat_timeout=max(1, int(timeout_s)),
        missed_heartbeat_callback=lambda *_: None,  # never ends this process (jaccl-run)
        shutdown_on_destruction=True)  # else shutdown() skips telling the service
    client.connect()
    if topology_again:
        client.key_value_delete("cpu:global_topology")  # the directory: every platform's entry
    client.shutdown()


_COLLECTIVE_OP = re.compile(r"\b(all-reduce|all-gather|all-to-all|collective-permute|"
                            r"reduce-scatter|ragged-all-to-all)(-start)?\(")
_compile_checks: list = []


class CompiledProgram:
    """What after_each_compile's checks see of a compiled program: the text of its HLO
    modules and its collective instructions, lines of that text (SPMD-partitioned: the
    collectives XLA inserted for shardings too), each read when first asked."""

    def __init__(self, executable) -> None:
        self._executable = executable

    @functools.cached_property
    def module_texts(self) -> list:
        return [module.to_string() for module in self._executable.hlo_modules()]

    @functools.cached_property
    def collectives(self) -> list:
        return [line.strip() for text in self.module_texts for line in text.splitlines()
                if _COLLECTIVE_OP.search(line)]


def after_each_compile(check) -> None:
    """Calls check(devices, program) after each XLA compilation of this process (once per new
    program; jit's cache serves the others), a compilation cache's hit too: `devices`, the
    program's devices; `program`, a CompiledProgram. What check raises is the compilation's
    error. Once per check."""
    from jax._src import compiler

    if check in _compile_checks:
        return
    if not _compile_checks:
        compile_or_get_cached = compiler.compile_or_get_cached

        @functools.wraps(compile_or_get_cached)
        def compile_and_check(backend, computation, devices, *args, **kwargs):
            executable = compile_or_get_cached(backend, computation, devices, *args, **kwargs)
            program = CompiledProgram(executable)
            for each in list(_compile_checks):
                each(list(devices.flat), program)
            return executable

        compiler.compile_or_get_cached = compile_and_check
    _compile_checks.append(check)
