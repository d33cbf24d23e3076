"""A job that goes on without a lost process (examples/elastic_data_parallel.py under jaccl-run
--keep-going, JAX's recoverability on): a process killed during a step's collective (the
others are in its all_reduce when it dies; blocking calls, every call asynchronous, or
jax.lax.psum carried by jaccl's mpiabi library, also with 2 devices per process) fails that step on
every survivor, naming the dead process; the step retried over JAX's live devices runs on a new
jaccl world of the survivors; the survivors end with the parameters of a job of their size resumed
from the state they went on from, bit for bit (blocking calls and jax.lax.psum); two losses one
after the other (the second named by its jax.process_index() though the second world renumbered the
survivors) on one host and between emulated hosts over jaccl's TCP and the OFI transport (the loss
seen as a closed link, every world of survivors linked anew); a process started again (jaccl-run
--restarts) rejoining with the survivors' state, on one host and between emulated hosts over TCP,
process 0 too, and in a program of XLA's collectives alone on jaccl's engine; MoE serving that
cannot shrink going on with moe_dispatch's lost_ranks (examples/elastic_moe_serving.py); a process
that stalls evicted at the others' deadline (JACCL_EVICT_STALLED: killed by them on one host, by
itself at their request between emulated hosts over TCP and OFI) and lost the same way;
nothing left behind. A world of survivors that could not be built is refused from then on,
saying why."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from harness import clean, run_job
from transports import OFI, TCP, expected, needs_ofi

# jaccl-run tells JAX's coordination service of a loss at once (a process that connected to it
# and died): the survivors need not wait for JAX's heartbeat timeout, which stays long enough
# that a stalled machine does not make JAX count live processes dead.
HEARTBEAT_S = 30
HEARTBEAT = {"JACCL_HEARTBEAT_TIMEOUT": str(HEARTBEAT_S)}


def finals(job, ranks) -> set:
    digests = {r: job.values(r, "FINAL") for r in ranks}
    assert all(len(d) == 1 for d in digests.values()), clean(job.output)[-4000:]
    return {d[0] for d in digests.values()}


# "async": every call on the devices' own threads (handlers/cpu/async_call.h) when the loss
# comes. "jax-lax": the gradients summed by jax.lax.psum, XLA's own collective, on jaccl's
# engine through the mpiabi library (jaccl-run's default): no jaccl op in the program, so the world
# of the survivors is made when XLA makes its communicator for their devices; with 2 devices
# per process, both devices of a survivor split MPI_COMM_WORLD at once, one of them making
# the new world while the other waits (before, the other split the lost world's devices).
# "process-0": JAX runs its coordination service in process 0 and ends every process when it
# dies; jaccl-run --keep-going runs the service itself, so process 0's survivors go on too.
# The job resumed from the survivors' state (a second job) runs for "blocking" and "jax-lax"
# only: the others go on over the same code from the same kind of state.
@pytest.mark.parametrize("calls, args, xla, devices, lost, resume", [
    ({}, [], "gloo", 1, 2, True), ({"JACCL_ASYNC_MIN_KB": "0"}, [], "gloo", 1, 2, False),
    ({}, ["--jax-lax"], "jaccl", 1, 2, True), ({}, ["--jax-lax"], "jaccl", 2, 2, False),
    ({}, [], "gloo", 1, 0, False)],
    ids=["blocking", "async", "jax-lax", "jax-lax-2-devices", "process-0"])
def test_survivors_go_on_and_match_a_job_resumed_from_their_state(tmp_path, calls, args, xla,
                                                                  devices, lost, resume):
    state = tmp_path / "state.npz"
    left = tuple(r for r in range(3) if r != lost)
    job = run_job("elastic.py", 3, devices, args=["--steps", "8", "--kill-at", "4", "--who",
                                                  str(lost), "--state-out", state, *args],
                  env={**HEARTBEAT, **calls, "JACCL_DEBUG": "info"}, timeout=180, keep_going=True,
                  xla_collectives=xla)
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    assert re.search(rf"jaccl-run: 2 of 3 processes finished; lost: process {lost} was killed "
                     r"by SIGKILL at [\d.]+ s\n", job.output), out[-3000:]
    for rank in left:
        lines = job.lines(rank)
        assert "step 3: loss" in " ".join(lines) and any(
            l.startswith("step 4 failed") for l in lines), out[-3000:]
        went_on = re.search(rf"^step 4 ran on {2 * devices} devices, ([\d.]+) s after the last "
                            r"step that completed", "\n".join(lines), re.M)
        assert went_on and float(went_on.group(1)) < HEARTBEAT_S / 2, out[-3000:]  # told at once
        assert any(l.startswith("step 7: loss") and l.endswith(f"on {2 * devices} devices")
                   for l in lines)
    # The survivors' collective in flight when the process died failed naming it.
    assert re.search(rf"\[[{''.join(map(str, left))}]\] jaccl \d+ WARN aborting: jaccl: process "
                     rf"{lost} \(pid \d+\) died", job.output), out[-3000:]
    if xla == "jaccl":  # XLA's collectives ran on jaccl before the loss and after it
        ran = re.findall(r"INFO all_reduce .* on rank \d/(\d) of communicator \w+ \(XLA's collectives\)",
                         job.output)
        assert {str(3 * devices), str(2 * devices)} <= set(ran), out[-3000:]
    survivors = finals(job, left)
    assert len(survivors) == 1, survivors
    assert int(np.load(state)["step"]) == 4
    assert job.leftovers() == []
    if not resume:
        return
    resumed = run_job("elastic.py", 2, devices, args=["--steps", "8", "--resume", state, *args],
                      env=HEARTBEAT, timeout=120, xla_collectives=xla)
    assert resumed.returncode == 0, clean(resumed.output)[-4000:]
    assert finals(resumed, (0, 1)) == survivors  # the same sums in the same order: bitwise
    assert resumed.leftovers() == []


# Over emulated hosts (one JACCL_HOST_ID a process, jaccl's TCP or the OFI transport between
# them) the loss is a link that closes, not a pid that vanishes, and each world after a loss
# brings up new links between the survivors.
@pytest.mark.parametrize("hosts", [pytest.param({}, id="1host"), pytest.param(TCP, id="hosts-tcp"),
                                   pytest.param(OFI, id="hosts-ofi", marks=needs_ofi)])
def test_two_losses_one_after_the_other_named_as_jax_numbers_them(hosts):
    # Process 1 goes first, so the second world numbers the survivors 0, 1, 2; the second loss
    # is still named by its jax.process_index(), 3.
    env = {**HEARTBEAT, **hosts, "JACCL_DEBUG": "info", "JACCL_TEST_FAKE_HOSTS": "4" if hosts else "0"}
    job = run_job("elastic.py", 4, args=["--steps", "6", "--kill-at", "2,4", "--who", "1,3"],
                  env=env, timeout=180, keep_going=True)
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    assert re.search(r"2 of 4 processes finished; lost: process 1 was killed by SIGKILL at [\d.]+ "
                     r"s; process 3 was killed by SIGKILL", job.output), out[-3000:]
    between = f"INFO between hosts: {expected(hosts)} " if hosts else None
    for rank in (0, 2):
        text = "\n".join(job.lines(rank))
        assert "step 2 ran on 3 devices" in text and "step 4 ran on 2 devices" in text, out[-3000:]
        worlds = re.split(r"INFO world generation \d+: ", text)
        assert len(worlds) == 3, out[-3000:]
        if between:  # every world, the survivors' two included, links its hosts over `hosts`
            assert all(between in world for world in worlds), out[-3000:]
    if hosts:  # "connection to rank 2 (device 6144, process 3, pid 4679 on host fake-host-3) failed"
        named = re.findall(r"WARN aborting: .*: connection to rank \d+ \(device \d+, (process \d+), "
                           r"pid \d+ on host fake-host-\d\) failed", job.output)
    else:
        named = re.findall(r"WARN aborting: jaccl: (process \d+) \(pid \d+\) died", job.output)
    assert set(named) == {"process 1", "process 3"}, out[-3000:]
    assert len(finals(job, (0, 2))) == 1
    assert job.leftovers() == []


# A process started again (jaccl-run --restarts) rejoins: before JAX's heartbeat declared it
# dead (the others' step fails, and is retried over the same processes, one of them a new
# incarnation: a new world over all three) or after the others went on without it (a world of
# two, then one of three when it is back). Either way it takes the survivors' state and every
# process ends with the same parameters (coming back before the heartbeat, those of a job that
# lost no one). Coming back before the heartbeat needs JAX's service in process 0
# (JACCL_COORDINATION_SERVICE=process0): jaccl-run's own service is told of the loss at once, so
# the others go on without it first. Process 0 comes back only where jaccl-run runs the service
# (it removes the device topology the lost one published). Between hosts (each world linking
# its hosts anew over jaccl's TCP, process 0 lost and back): tests/multihost/test_hosts.py.
# "jax-lax": no jaccl op in the program (jax.lax.psum and all_gather, XLA's collectives on
# jaccl's engine through the mpiabi library): the others' world with it is built when XLA first runs
# a collective over all of them, their communicators from before split again with it (with 2
# devices per process, in split rounds of each process's devices).
@pytest.mark.parametrize("back, who, xla, devices", [
    pytest.param("before-the-heartbeat", 2, "gloo", 1, id="before-the-heartbeat"),
    pytest.param("after-the-others-went-on", 2, "gloo", 1, id="after-the-others-went-on"),
    pytest.param("after-the-others-went-on", 0, "gloo", 1,
                 id="after-the-others-went-on-process-0"),
    pytest.param("after-the-others-went-on", 1, "jaccl", 1,
                 id="after-the-others-went-on-jax-lax"),
    pytest.param("after-the-others-went-on", 2, "jaccl", 2,
                 id="after-the-others-went-on-jax-lax-2-devices"),
    pytest.param("before-the-heartbeat", 2, "jaccl", 1, id="before-the-heartbeat-jax-lax")])
def test_a_process_started_again_rejoins_with_the_survivors_state(back, who, xla, devices):
    late = back == "after-the-others-went-on"
    others = [r for r in (0, 1, 2) if r != who]
    env = {"JACCL_DEBUG": "info", "JACCL_HEARTBEAT_TIMEOUT": "20",
           "JACCL_TEST_RESTART_DELAY_S": "2" if late else "0"}
    if not late:
        env["JACCL_COORDINATION_SERVICE"] = "process0"
    lax_args = ["--jax-lax"] if xla == "jaccl" else []
    args = ["--steps", "32" if late else "16", "--pace", "0.25", "--kill-at", "3", "--who",
            str(who), "--rejoin", *lax_args]
    job = run_job("elastic.py", 3, devices, args=args, env=env, timeout=180, keep_going=True,
                  restarts=1, xla_collectives=xla)
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    assert re.search(rf"jaccl-run: process {who} was killed by SIGKILL at [\d.]+ s; starting it "
                     r"again \(--restarts\)", job.output), out[-3000:]
    assert (f"jaccl-run: 3 of 3 processes finished, 1 restarted; lost: process {who} was killed"
            in job.output), out[-3000:]
    rejoined = [int(m) for m in re.findall(r"^rejoined at step (\d+) with processes \[0, 1, 2\]$",
                                            "\n".join(job.lines(who)), re.M)]
    assert len(rejoined) == 1 and rejoined[0] >= 3, out[-3000:]
    assert re.search(rf"INFO world generation \d+: process {who} started again, rejoins "
                     r"processes \[0, 1, 2\]", job.output), out[-3000:]
    if xla == "jaccl":  # it joined at XLA's first collective: no jaccl op ran in the program
        assert "XLA's first collective started jaccl's engine" in "\n".join(job.lines(who))
    for rank in others:
        text = "\n".join(job.lines(rank))
        before = str(others) if late else "[0, 1, 2]"  # the world it came back to
        assert re.search(rf"INFO world generation \d+: processes \[0, 1, 2\] of {re.escape(before)} "
                         rf"go on, \[{who}\] back", text), out[-3000:]
        assert (f"step 3 ran on {2 * devices} devices" in text) == late, out[-3000:]
        if late:
            assert f"step {rejoined[0]}: processes [{who}] rejoined" in text, out[-3000:]
        assert "step 15: loss" in text, out[-3000:]
        assert text.count(f" on {3 * devices} devices") >= 10, out[-3000:]
    ended = finals(job, (0, 1, 2))
    assert len(ended) == 1  # the one that came back holds the survivors' bits
    assert job.leftovers() == []
    if not late:  # every step ran on the three processes: bit for bit a job that lost no one
        whole = run_job("elastic.py", 3, args=["--steps", "16"], env=HEARTBEAT, timeout=120)
        assert whole.returncode == 0, clean(whole.output)[-4000:]
        assert finals(whole, (0, 1, 2)) == ended


# On one host the survivor that times out reads the stalled process's call board and kills
# it. Between emulated hosts (a process on each, over jaccl's TCP and the OFI transport) it
# cannot: it asks the process it waits for, over their link, to leave if it never reached the
# call, and that process's I/O thread reads its own call board and kills it.
@pytest.mark.parametrize("hosts", [pytest.param({}, id="1host"), pytest.param(TCP, id="hosts-tcp"),
                                   pytest.param(OFI, id="hosts-ofi", marks=needs_ofi)])
def test_a_stalled_process_is_evicted_and_the_others_go_on_as_after_a_loss(hosts):
    """Process 2 stalls at step 3 (asleep, alive to JAX's heartbeat): without eviction the
    others would wait in live_devices for good. Under --keep-going (JACCL_EVICT_STALLED=1) a
    survivor's all_reduce times out and evicts it (the other survivor times out too, or first
    learns of that failure from the abort board or its link, or sees the process gone), and the
    step goes on over the two survivors."""
    env = {**HEARTBEAT, **hosts, "JACCL_TIMEOUT": "4", "JACCL_TEST_FAKE_HOSTS": "3" if hosts else "0"}
    job = run_job("elastic.py", 3, args=["--steps", "6", "--kill-at", "3", "--stall"], env=env,
                  timeout=120, keep_going=True)
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    assert "stalling at step 3" in job.lines(2), out[-3000:]
    assert re.search(r"lost: process 2 was killed by SIGKILL at [\d.]+ s\n", job.output), out[-3000:]
    timed_out = r"\[[01]\] jaccl \d+ WARN aborting: .*timed out after 4 s \(JACCL_TIMEOUT\) in all_reduce .*"
    if hosts:
        assert re.search(timed_out + r"; process 2 \(on another host\) asked to leave if it never "
                         r"reached this call \(JACCL_EVICT_STALLED\)", job.output), out[-3000:]
        assert re.search(r"\[2\] jaccl \d+ WARN evicted: process [01] timed out in call #\d+ "
                         r"waiting for device \d+, process 2, .*which never reached it; this "
                         r"process leaves with SIGKILL", job.output), out[-3000:]
    else:
        assert re.search(timed_out + r"rank 2 \(device \d+, process 2, pid (\d+)\) never reached "
                         r"this call .*; process 2 \(pid \1\) evicted with SIGKILL "
                         r"\(JACCL_EVICT_STALLED\)", job.output), out[-3000:]
    for rank in (0, 1):
        text = "\n".join(job.lines(rank))
        assert "WARN aborting: " in text and "process 2" in text, out[-3000:]
        assert "step 3 ran on 2 devices" in text and "step 5: loss" in text, out[-3000:]
    assert len(finals(job, (0, 1))) == 1
    assert job.leftovers() == []


NO_NEXT_WORLD = textwrap.dedent("""
    import jax
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_enable_recoverability", True)
    import jax_jaccl as jaccl, jax_jaccl._bootstrap as bootstrap
    import jax_jaccl._recovery as recovery
    jaccl.init()
    def fails(failed, live, in_program=False):
        raise TimeoutError("the survivors' key-value exchange timed out")
    recovery.next_generation, recovery.changed = fails, lambda world, live: True  # a loss
    for attempt in range(2):  # as the example's retries, or XLA's next communicator
        try:
            bootstrap.init(jax.devices())
        except Exception as e:
            print("RAISED", type(e).__name__, e)
    import jax_jaccl._xla_collectives as xla_collectives
    # what XLA's split would raise
    xla_collectives.renew_failed = lambda why: print("RENEW FAILED", why)
    bootstrap.renew_after_loss()
    jaccl.shutdown()
    recovery.changed = lambda world, live: False
    print("AGAIN", jaccl.init().process_count)
""")


def test_a_world_after_a_loss_that_could_not_be_built_is_refused_until_shutdown():
    """The world after a lost process failed to start (here: a stand-in for its key-value
    exchange timing out): every later init() says why, where it used to start the job's first
    world again and fail on its keys (ALREADY_EXISTS), and so does the mpiabi library's next split
    for XLA's collectives; jaccl.shutdown() lifts it."""
    done = subprocess.run([sys.executable, "-c", NO_NEXT_WORLD], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    raised = [l for l in done.stdout.splitlines() if l.startswith("RAISED")]
    assert raised == [
        "RAISED TimeoutError the survivors' key-value exchange timed out",
        "RAISED RuntimeError jaccl: no world over processes [0] after generation 0 (TimeoutError: "
        "the survivors' key-value exchange timed out)"], done.stdout
    assert "RENEW FAILED jaccl: no new world for XLA's collectives after a lost process: RuntimeError: " \
        "jaccl: no world over processes [0] after generation 0" in done.stdout, done.stdout
    assert "AGAIN 1" in done.stdout, done.stdout


@pytest.mark.parametrize("mode, compiled, devices", [
    ("back", "after", 1), ("lost", "before", 1), ("lost-inside", "before", 1),
    ("lost-inside", "before", 2), ("lost-last", "after", 1), ("lost-last", "before", 1),
    ("lost-last-live-order", "before", 2), ("lost-last", "before", 2), ("quiet", "after", 1)])
def test_a_group_new_to_xla_after_a_loss_holds_every_device_or_is_refused(mode, compiled,
                                                                          devices):
    """XLA's collectives on jaccl (no jaccl op in the program): after a loss, a group XLA makes
    for the first time splits MPI_COMM_WORLD. With the lost process back, the others' world
    must include it first (the split would otherwise leave its device out: a sum of two where
    there are three). Over a lost process's devices: a program compiled after the loss is
    refused as it compiles; one compiled before, at the split of its group where the group is
    led by a lost device or misses one inside (the survivors' split completed without it: a
    sum of two), or lacking only its last members, which the mpiabi library alone cannot tell from a
    whole group: jaccl read the program's groups as it compiled (_xla_groups.py), also where
    the live members are a group the survivors' own steps made ("lost-last-live-order": a
    second communicator of one group). "quiet":
    the survivors' first call after the loss is XLA's split of the live devices' group; the
    world is revoked before it (a dead process on this host), else the split would meet the
    dead process and XLA would keep the failed communicator: every later step failing."""
    job = run_job("xla_new_group.py", 3, devices=devices, args=[mode, "--compiled", compiled],
                  env=HEARTBEAT, timeout=120, keep_going=True,
                  restarts=1 if mode == "back" else 0, xla_collectives="jaccl")
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    ranks = (0, 1, 2) if mode == "back" else (0, 1)
    sums = {"back": ["3.0"], "quiet": ["1.0"]}
    why = {"lost": "belongs to no process of jaccl's world", "lost-inside": "is not whole",
           "lost-last": r"this program runs collectives over devices of processes \[2\], which "
                        "were lost"}.get(mode)
    if mode.startswith("lost-last") and compiled == "before":
        why = (r"the live members of a group of devices .* of a program compiled before "
               r"processes \[2\] were lost: its collectives would run over the live devices only"
               + (r" \(a program also has a group of these devices alone" if "order" in mode
                  else ""))
    for rank in ranks:
        if mode in sums:
            assert job.values(rank, "SUM") == sums[mode], out[-3000:]
        else:
            raised = " ".join(job.lines(rank))
            assert "RAISED" in raised and re.search(why, raised), out[-3000:]
    assert job.leftovers() == []


def test_a_lost_process_0_that_ran_jax_s_service_ends_the_job_at_once_saying_so():
    """Where process 0 runs JAX's coordination service (JACCL_COORDINATION_SERVICE=process0),
    its loss ends the others (JAX's runtime): at once, jaccl-run saying why, nothing left
    behind."""
    job = run_job("elastic.py", 3, args=["--steps", "16", "--pace", "0.25", "--kill-at", "3",
                                         "--who", "0"],
                  env={**HEARTBEAT, "JACCL_COORDINATION_SERVICE": "process0"}, timeout=60,
                  keep_going=True)
    out = clean(job.output)
    assert job.returncode == 128 + 9, out[-3000:]  # process 0's SIGKILL, the first failure
    assert re.search(r"jaccl-run: process 0 was killed by SIGKILL at [\d.]+ s; JAX's coordination "
                     r"service ran in it \(JACCL_COORDINATION_SERVICE=process0\): JAX's runtime "
                     r"ends the others", job.output), out[-3000:]
    assert "jaccl-run: 0 of 3 processes finished; lost: process 0 was killed" in job.output
    ended = [float(t) for t in re.findall(r"jaccl-run: process [12] \w+ .* at ([\d.]+) s;",
                                          job.output)]
    lost = float(re.search(r"process 0 was killed by SIGKILL at ([\d.]+) s", job.output).group(1))
    assert len(ended) == 2 and max(ended) - lost < HEARTBEAT_S / 2, out[-3000:]  # not a hang
    assert job.leftovers() == []


def test_moe_serving_goes_on_without_a_lost_expert_rank():
    """examples/elastic_moe_serving.py: process 2 killed at step 2; the survivors serve that
    step again and the next ones over their two devices with lost_ranks=(2,), the pairs routed
    to its experts dropped and counted, every output checked against numpy on the host."""
    job = run_job("elastic.py", 3, args=["--example", "elastic_moe_serving.py", "--steps", "4",
                                         "--kill-at", "2"],
                  env=HEARTBEAT, timeout=180, keep_going=True)
    out = clean(job.output)
    assert job.returncode == 0, out[-4000:]
    for rank in (0, 1):
        lines = job.lines(rank)
        assert any(l.startswith("step 2 failed") for l in lines), out[-3000:]
        served = [l for l in lines if re.match(r"step \d: served 16 tokens", l)]
        assert [l.split(":")[0] for l in served] == ["step 0", "step 1", "step 2", "step 3"], out[-3000:]
        assert all("on 3 devices, lost experts of ranks [], 0 of" in l for l in served[:2])
        for l in served[2:]:
            dropped = re.search(r"on 2 devices, lost experts of ranks \[2\], (\d+) of", l)
            assert dropped and int(dropped.group(1)) > 0, l
        assert "FINAL served" in lines
    assert job.leftovers() == []
