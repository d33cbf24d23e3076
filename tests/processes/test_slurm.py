"""Under SLURM no hostfile is needed: `srun python script.py` starts the tasks with SLURM's
variables, jax_jaccl.distributed.initialize() lets jax.distributed.initialize() read them (JAX's
SLURM cluster environment), and jaccl bootstraps from JAX. No SLURM here: fake_srun() starts
the tasks as srun does on one node (SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS,
SLURM_PROCID, SLURM_LOCALID, SLURM_STEP_NUM_NODES), which is the whole of what that path reads.
The collective battery then checks every value against jax.lax on gloo; with the variables
`jaccl-info --xla-collectives-env` prints, XLA's own collectives run on jaccl there too."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path

WORKERS = Path(__file__).parents[1] / "workers"
TIMEOUT_S = 240
BATTERY_CHECKS = 161  # every check of workers/collectives.py's transport types at 2 x 1


def fake_srun(tasks: int, *command, env=None) -> list:
    """Each task's (returncode, output) of `command` started as `srun -n tasks` on one node."""
    base = dict(os.environ)  # PYTHONPATH has tests/support (tests/conftest.py)
    for key in [k for k in base if k.startswith(("JACCL_", "SLURM_", "OMPI_", "PMI"))
                and k != "JACCL_TIMEOUT"]:
        del base[key]  # nothing from jaccl-run or another launcher: SLURM's variables only
    base.update(env or {}, SLURM_JOB_ID=str(random.randrange(1, 1 << 20)),
                SLURM_STEP_NODELIST="localhost", SLURM_NTASKS=str(tasks),
                SLURM_STEP_NUM_NODES="1")
    procs = [subprocess.Popen([sys.executable, *map(str, command)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True,
                              env=dict(base, SLURM_PROCID=str(k), SLURM_LOCALID=str(k)))
             for k in range(tasks)]
    try:
        outputs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
        return [(p.returncode, out) for p, out in zip(procs, outputs)]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_the_battery_under_srun():
    env = {"JACCL_TEST_BATTERY_DTYPES": "transport", "JAX_PLATFORMS": "cpu"}
    done = fake_srun(2, WORKERS / "collectives.py", "--marker", "jaccl-test-slurm", env=env)
    for task, (code, out) in enumerate(done):
        assert code == 0 and out.splitlines()[-1] == "DONE", (task, out[-3000:])
        assert f"STARTED {task} 2" in out, out[:1500]
        checks = sum(line.startswith("OK ") for line in out.splitlines())
        assert checks == BATTERY_CHECKS, checks


def test_xla_collectives_on_jaccl_under_srun():
    words = subprocess.run([sys.executable, "-m", "jax_jaccl.info", "--xla-collectives-env"],
                           capture_output=True, text=True, check=True).stdout.split()
    done = fake_srun(2, WORKERS / "xla_collectives.py", "jaccl",
                     env=dict(word.split("=", 1) for word in words))
    for task, (code, out) in enumerate(done):
        assert code == 0 and "XLA COLLECTIVES jaccl CHECKED 23 ON 2 x 1" in out, (task, out[-3000:])
