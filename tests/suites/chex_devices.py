"""pytest plugin for chex's tests, in both runs (`-p chex_devices`): they ask for CPU devices
through chex's absl flag chex_n_cpu_devices (default 1), which pytest never parses, and with 1
they skip every pmap variant; this sets it to XLA_FLAGS' device count, before any test module's
setUpModule reads it."""


def pytest_configure(config):
    from absl import flags
    from chex._src import fake

    flags.FLAGS["chex_n_cpu_devices"].value = fake.get_n_cpu_devices_from_xla_flags()
