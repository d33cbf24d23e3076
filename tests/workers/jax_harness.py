"""A test module of the kind jax's own multi-process tests are (jax._src.test_multiprocess,
the harness of jax's multiprocess tests): `python jax_harness.py --num_processes=N` starts N
copies of itself, each calling jax.distributed.initialize() itself (not jaccl's initialize()
and not jaccl-run), with site-packages on PYTHONPATH (the harness passes its sys.path on that
way), and runs the tests below in every process. jax_jaccl.lax's collectives stand in
jax.lax's place, as a conftest sets them to run another project's tests on jaccl. Each test
checks the values against numpy and that jaccl's world spans every process. The launcher
writes each process's output to $TEST_UNDECLARED_OUTPUTS_DIR/jax_<i>_std{out,err}.log."""

import jax
import numpy as np

import jax_jaccl as jaccl
import jax_jaccl.lax as jaccl_lax

REPLACED = ("psum", "pmax", "all_gather", "all_to_all", "ppermute", "psum_scatter")
for _name in REPLACED:
    setattr(jax.lax, _name, getattr(jaccl_lax, _name))

from absl.testing import parameterized  # noqa: E402
from jax import lax  # noqa: E402
from jax._src import test_multiprocess  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def grid_mesh() -> Mesh:
    """(processes, devices per process), axes ("x", "y"): "x" crosses processes."""
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return Mesh(np.array(devices).reshape(jax.process_count(), -1), ("x", "y"))


def global_array(mesh: Mesh, spec: P, value: np.ndarray) -> jax.Array:
    return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec),
                                        lambda index: value[index])


class JacclInJaxLaxsPlace(test_multiprocess.MultiProcessTest):

    def setUp(self):
        super().setUp()
        self.assertEqual(jax.device_count(), 4, "the test expects 2 processes x 2 devices")
        self.assertIs(lax.psum, jaccl_lax.psum)

    def tearDown(self):
        world = jaccl.init()
        self.assertEqual((world.process_index, world.process_count),
                         (jax.process_index(), jax.process_count()))
        self.assertGreater(world.process_count, 1)
        super().tearDown()

    @parameterized.parameters(np.int32, np.float32, jax.numpy.bfloat16)
    def test_psum_over_both_axes(self, dtype):
        mesh = grid_mesh()
        value = (np.arange(4 * 3) % 7 - 3).reshape(4, 3).astype(dtype)
        f = jax.jit(jax.shard_map(lambda b: lax.psum(b, ("x", "y")), mesh=mesh,
                                  in_specs=P(("x", "y")), out_specs=P(("x", "y"))))
        out = f(global_array(mesh, P(("x", "y")), value))
        want = np.tile(value.astype(np.float32).sum(0, keepdims=True), (4, 1)).astype(dtype)
        for shard in out.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])

    def test_pmax_across_processes(self):
        mesh = grid_mesh()
        value = np.array([[5, -2], [1, 9], [-7, 3], [4, 4]], np.int32)
        f = jax.jit(jax.shard_map(lambda b: lax.pmax(b, "x"), mesh=mesh,
                                  in_specs=P(("x", "y")), out_specs=P(("x", "y"))))
        out = f(global_array(mesh, P(("x", "y")), value))
        want = np.maximum(value[:2], value[2:])
        for shard in out.addressable_shards:
            row = shard.index[0].start % 2
            np.testing.assert_array_equal(np.asarray(shard.data)[0], want[row])

    def test_all_gather_tiled_over_each_axis(self):
        mesh = grid_mesh()
        value = np.arange(4 * 5, dtype=np.float32).reshape(2, 2, 5)

        def body(b):
            return lax.all_gather(lax.all_gather(b, "x", axis=0, tiled=True), "y", axis=1,
                                  tiled=True)

        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"), out_specs=P(),
                                  check_vma=False))
        out = f(global_array(mesh, P("x", "y"), value))
        for shard in out.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), value)

    def test_all_to_all_over_every_device(self):
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        mesh = Mesh(np.array(devices), ("i",))
        value = np.arange(4 * 4 * 3, dtype=np.int32).reshape(4, 4, 3)
        f = jax.jit(jax.shard_map(
            lambda b: lax.all_to_all(b[0], "i", split_axis=0, concat_axis=0)[None],
            mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        out = f(global_array(mesh, P("i"), value))
        want = value.transpose(1, 0, 2)  # device d gets block d of every device, in order
        for shard in out.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])

    def test_ppermute_shifts_between_processes(self):
        mesh = grid_mesh()
        value = np.arange(4 * 2, dtype=np.float32).reshape(2, 2, 2)
        f = jax.jit(jax.shard_map(lambda b: lax.ppermute(b, "x", [(0, 1), (1, 0)]), mesh=mesh,
                                  in_specs=P("x", "y"), out_specs=P("x", "y")))
        out = f(global_array(mesh, P("x", "y"), value))
        want = value[::-1]
        for shard in out.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])

    def test_psum_scatter_over_processes(self):
        mesh = grid_mesh()
        value = np.arange(2 * 2 * 6, dtype=np.float32).reshape(2, 2, 6)
        f = jax.jit(jax.shard_map(
            lambda b: lax.psum_scatter(b[0], "x", scatter_dimension=1, tiled=True)[None],
            mesh=mesh, in_specs=P("x", "y"), out_specs=P("x", "y")))
        out = f(global_array(mesh, P("x", "y"), value))
        total = value.sum(0)  # [y, 6]: process p keeps columns 3p..3p+2
        want = np.stack([total[:, :3], total[:, 3:]])
        for shard in out.addressable_shards:
            np.testing.assert_array_equal(np.asarray(shard.data), want[shard.index])


if __name__ == "__main__":
    test_multiprocess.main()
