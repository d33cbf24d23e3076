#!/usr/bin/env python3
"""Other projects' own tests, run twice: as they are, and with jax_jaccl.lax's collectives in
jax.lax's place.

    make suites                                  # or: .venv/bin/python tests/suites/run_suites.py
    .venv/bin/python tests/suites/run_suites.py --only chex,optax -k pmap     # a subset

Contract: the script makes (or reuses) its own environment, build/suites/venv, with .venv's jax
and jaxlib (pinned to the versions .venv has), the pinned projects below, and jax_jaccl from
this checkout (editable, built without CUDA in its own build folder, build/suites/cmake-<tag>;
reinstalled at every run, an incremental build). It takes each project's tests from PyPI alone:
flax's from its sdist (pip download, unpacked in build/suites/src), chex's, optax's and
dm-haiku's from their wheels, which ship them inside the package. Each suite's chosen files
(those that exercise collectives) run under pytest with a per-test timeout and 8 CPU devices
(XLA_FLAGS), once plain and once with `-p jaccl_in_lax` (jaccl_in_lax.py beside this file:
jax_jaccl.lax's functions set on jax.lax, as a conftest.py can). It prints one table (passed /
failed / skipped, plain and with jaccl) and the tests that fail with jaccl only, and exits 1 if
there are any or a run crashed. Logs and junit files: build/suites/results. Not here: jax's own
tests (its sdist on PyPI has no tests/ folder; they are on GitHub only) and equinox's (its sdist
ships only the package).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORK = ROOT / "build" / "suites"  # under build/: ignored by git and by tests/in_process's tree walks
ENV = WORK / "venv"
RESULTS = WORK / "results"
BASE_PY = ROOT / os.environ.get("VENV", ".venv") / "bin" / "python"
PY = ENV / "bin" / "python"
DEVICES = 8  # CPU devices for every run (XLA_FLAGS=--xla_force_host_platform_device_count)
RUN_DEADLINE_S = 1800  # one suite's one run, at most


@dataclass(frozen=True)
class Suite:
    dist: str          # the project's name on PyPI
    version: str       # pinned: a release that works with the pinned jax
    files: tuple       # test files, relative to the unpacked sdist or to site-packages (wheels)
    sdist: bool = False
    plugins: tuple = ()  # pytest plugins beside this file, loaded in both runs


SUITES = (
    Suite("flax", "0.12.12", ("tests/linen/linen_transforms_test.py",
                              "tests/linen/partitioning_test.py",
                              "tests/nnx/transforms_test.py", "tests/nnx/spmd_test.py"), sdist=True),
    Suite("chex", "0.1.92", ("chex/_src/fake_test.py", "chex/_src/variants_test.py",
                             "chex/_src/asserts_test.py"), plugins=("chex_devices",)),
    Suite("dm-haiku", "0.0.17", ("haiku/_src/batch_norm_test.py", "haiku/_src/nets/vqvae_test.py")),
    Suite("optax", "0.2.8", ("optax/transforms/_conditionality_test.py",
                             "optax/contrib/_sam_test.py")),
)
NOT_REPRODUCED = (
    "jax: its sdist on PyPI has no tests/ folder (pmap_test.py, shard_map_test.py, ... are on GitHub only)",
    "equinox: its sdist on PyPI ships only the equinox package, no tests",
)


def sh(*cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=True, **kw)


def pip(*args, **kw) -> None:
    """pip in build/suites/venv, its output in RESULTS/pip.log (shown when it fails)."""
    log = RESULTS / "pip.log"
    with open(log, "a") as out:
        done = subprocess.run([str(a) for a in (PY, "-m", "pip", *args)], stdout=out,
                              stderr=subprocess.STDOUT, **kw)
    if done.returncode:
        sys.exit(f"pip {' '.join(map(str, args))} failed:\n" + log.read_text()[-3000:])


def jax_pins() -> list[str]:
    """.venv's jax and jaxlib, as requirements."""
    code = "from importlib.metadata import version as v; print(v('jax'), v('jaxlib'))"
    jax, jaxlib = sh(BASE_PY, "-c", code, capture_output=True, text=True).stdout.split()
    return [f"jax=={jax}", f"jaxlib=={jaxlib}"]


def ensure_env() -> None:
    """build/suites/venv with the pins (installed once; a stamp records them) and jax_jaccl from
    this checkout (reinstalled every time: an incremental build in its own build folder)."""
    wanted = "\n".join([*jax_pins(), *(f"{s.dist}=={s.version}" for s in SUITES), "pytest",
                        "pytest-timeout", "numpy", "nanobind", "scikit-build-core>=0.10", "ninja",
                        "cmake"])
    stamp = ENV / ".suites-installed"
    if not PY.exists():
        sh(sys.executable, "-m", "venv", ENV)
    if not stamp.exists() or stamp.read_text() != wanted:
        pip("install", *wanted.split("\n"))
        stamp.write_text(wanted)
    pip("install", "--no-deps", "--no-build-isolation", "-C",
        "build-dir=build/suites/cmake-{wheel_tag}", "-e", ROOT, cwd=ROOT,
        env={**os.environ, "JACCL_CUDA": "OFF"})


def fetch(suite: Suite) -> Path:
    """The folder the suite's files are relative to: the unpacked sdist, or site-packages."""
    if not suite.sdist:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        return Path(sh(PY, "-c", code, capture_output=True, text=True).stdout.strip())
    where = WORK / "src" / f"{suite.dist}-{suite.version}"
    if not where.exists():
        downloads = WORK / "src" / "downloads"
        pip("download", "--no-deps", "--no-binary", ":all:", f"{suite.dist}=={suite.version}",
            "-d", downloads)
        name = suite.dist.replace("-", "_")
        (tarball,) = [p for p in downloads.glob("*.tar.gz")
                      if p.name.replace("-", "_").lower() == f"{name}_{suite.version}.tar.gz"]
        with tarfile.open(tarball) as tar:
            top = tar.getnames()[0].split("/")[0]
            tar.extractall(WORK / "src", filter="data")
        (WORK / "src" / top).rename(where)
    return where


def run_pytest(suite: Suite, where: Path, jaccl: bool, args) -> tuple[dict | None, int | None]:
    """One run, its log in RESULTS: {test id: 'passed' | 'failed' | 'skipped'}, or None when
    pytest left no junit file (it crashed) or, with jaccl, the swap did not hold to the end; and
    how many tests traced a jaccl op (None for a plain run)."""
    mode = "jaccl" if jaccl else "plain"
    xml, log = RESULTS / f"{suite.dist}-{mode}.xml", RESULTS / f"{suite.dist}-{mode}.log"
    xml.unlink(missing_ok=True)
    cmd = [ENV / "bin" / "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-p", "no:jax_jaccl",
           f"--timeout={args.timeout}", f"--junitxml={xml}", *suite.files]
    if not suite.sdist:  # no project config above site-packages, nor jax_jaccl's own
        cmd += ["-c", RESULTS / "empty.ini", f"--rootdir={where}", f"--confcutdir={where}"]
    for plugin in suite.plugins:
        cmd += ["-p", plugin]
    if args.k:
        cmd += ["-k", args.k]
    if jaccl:
        cmd += ["-p", "jaccl_in_lax"]
    # first: chex reads the device count only at the start of XLA_FLAGS
    flags = f"--xla_force_host_platform_device_count={DEVICES} {os.environ.get('XLA_FLAGS', '')}"
    env = {**os.environ, "XLA_FLAGS": flags.strip(), "JAX_PLATFORMS": "cpu", "PYTHONPATH": HERE,
           "SUITES_TRACING_LIST": RESULTS / f"{suite.dist}-tracing.txt"}
    with open(log, "w") as out:  # a whole run's deadline too: a hang in native code ignores
        try:                       # pytest-timeout's signal; the run then counts as no result
            subprocess.run([str(c) for c in cmd], cwd=where, env=env, stdout=out,
                           stderr=subprocess.STDOUT, timeout=RUN_DEADLINE_S)
        except subprocess.TimeoutExpired:
            out.write(f"\nrun_suites: no result within {RUN_DEADLINE_S} s\n")
            return None, None
    if not jaccl:
        return (parse_junit(xml) if xml.exists() else None), None
    held, tracing = swap_report(log)
    return (parse_junit(xml) if xml.exists() and held else None), tracing


def swap_report(log: Path) -> tuple[bool, int]:
    """From jaccl_in_lax's closing line: whether every name was still jax_jaccl.lax's at the end,
    and how many tests traced a jaccl op."""
    found = re.search(r"^jaccl_in_lax: (\d+) of (\d+) .*; (\d+) tests traced", log.read_text(), re.M)
    return (found[1] == found[2], int(found[3])) if found else (False, 0)


def parse_junit(xml: Path) -> dict:
    outcomes = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname')}::{case.get('name')}"
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        if outcomes.get(test) != "failed":
            outcomes[test] = outcome
    return outcomes


def counts(outcomes: dict | None) -> str:
    if outcomes is None:
        return "no result (see log)"
    return " / ".join(str(sum(o == k for o in outcomes.values())) for k in ("passed", "failed", "skipped"))


def report(rows: list, jax_version: str, seconds: float) -> bool:
    """Prints the table and the jaccl-only failures; True when there are none and nothing crashed."""
    print(f"\njax {jax_version}, {DEVICES} CPU devices; passed / failed / skipped")
    print(f"{'suite':<18} {'plain':>18}  {'with jaccl':>18}  {'tests tracing jaccl':>19}  "
          "jaccl-only failures")
    clean, listing = True, []
    for suite, plain, jaccl, tracing in rows:
        only = sorted(t for t, o in (jaccl or {}).items()
                      if o == "failed" and (plain or {}).get(t) != "failed")
        clean &= plain is not None and jaccl is not None and not only
        print(f"{suite.dist + ' ' + suite.version:<18} {counts(plain):>18}  "
              f"{counts(jaccl):>18}  {tracing:>19}  {len(only)}")
        listing += [f"  {suite.dist}: {t}" for t in only]
    if listing:
        print("failing with jaccl only:", *listing, sep="\n")
    print("not reproduced here:", *(f"  {n}" for n in NOT_REPRODUCED), sep="\n")
    print(f"took {seconds:.0f} s; logs in {RESULTS.relative_to(ROOT)}")
    return clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated suites (PyPI names), e.g. chex,optax")
    parser.add_argument("-k", help="pytest -k expression, for a quick subset")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per test (pytest-timeout)")
    args = parser.parse_args()
    start = time.monotonic()
    suites = [s for s in SUITES if not args.only or s.dist in args.only.split(",")]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "pip.log").write_text("")
    ensure_env()
    (RESULTS / "empty.ini").write_text("[pytest]\n")
    rows = []
    for suite in suites:
        where = fetch(suite)
        plain, _ = run_pytest(suite, where, False, args)
        rows.append((suite, plain, *run_pytest(suite, where, True, args)))
    jax_version = jax_pins()[0].split("==")[1]
    return 0 if report(rows, jax_version, time.monotonic() - start) else 1


if __name__ == "__main__":
    sys.exit(main())
