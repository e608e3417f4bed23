"""Property 5, one lifecycle path: each failure, in a real subprocess of the CLI, ends the run cleanly.

Each case checks: ends within 10 s of the fault, the documented non-zero exit
status, a message naming the side and the cause (with the collector's traceback
where it raised), no process of the run left, no shared-memory segment left.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from runtime_helpers import HERE, REPO, processes_with_marker, shm_entries

from offpolicy.checkpoint import load_checkpoint
from offpolicy.exit_status import ExitStatus
from offpolicy.runtime.learner import SAFE_POINT_GRACE_S

# faults must be noticed within seconds: alone on the machine under `make test` (marker `serial`)
pytestmark = pytest.mark.serial

LONG_RUN = 10**9
BASE_ARGS = [
    "env=ant",
    "env.num_envs=8",
    "algo=standin",
    "logger=none",
    f"hydra.searchpath=[file://{HERE / 'conf'}]",
]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class CliRun:
    """`python -m offpolicy.train` in a subprocess, tagged so its descendants can be found afterwards."""

    def __init__(self, run_dir: Path, *overrides: str, own_group: bool = False) -> None:
        self.run_dir = run_dir
        self.marker = f"OFFPOLICY_TEST_{uuid.uuid4().hex}"
        env = {**os.environ, self.marker: "1", "PYTHONUNBUFFERED": "1"}
        env.pop("CUDA_VISIBLE_DEVICES", None)
        self.shm_before = shm_entries()
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "offpolicy.train", *BASE_ARGS, f"hydra.run.dir={run_dir}", *overrides],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # A shell starts background jobs with SIGINT ignored, and Python keeps an inherited
            # SIG_IGN: give the run Python's Ctrl-C handling however the suite itself was launched.
            preexec_fn=_default_sigint,
            process_group=0 if own_group else None,  # own_group: a signal can go to the whole run, as Slurm sends it
        )

    def collector_pid(self, timeout_s: float = 60.0) -> int:
        """Wait for the run to be ticking (pid file written after the handshake) and return the collector pid."""
        path = self.run_dir / "collector.pid"
        deadline = time.monotonic() + timeout_s
        while not path.exists() or not path.read_text().strip():
            assert self.proc.poll() is None, f"run ended early: {self.proc.communicate()}"
            assert time.monotonic() < deadline, "the collector never started"
            time.sleep(0.05)
        return int(path.read_text())

    def wait_for_env_steps(self, env_steps: int, timeout_s: float = 30.0) -> None:
        """Wait until a metric row reports at least `env_steps`."""
        rows = self.run_dir / "metrics.jsonl"
        deadline = time.monotonic() + timeout_s
        while not (
            rows.exists() and any(json.loads(x)["env_steps"] >= env_steps for x in rows.read_text().splitlines())
        ):
            assert time.monotonic() < deadline, "the run never got going"
            time.sleep(0.05)

    def finish(self, timeout_s: float = 30.0) -> tuple[int, str, str, float]:
        """Exit status, stdout, stderr and the seconds from now to the exit."""
        t0 = time.monotonic()
        try:
            out, err = self.proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"the run did not end within {timeout_s} s:\n{err[-3000:]}")
        return self.proc.returncode, out, err, time.monotonic() - t0

    def assert_clean(self) -> None:
        """No process of this run left and no new shared-memory segment of its learner."""
        deadline = time.monotonic() + 3.0
        while processes_with_marker(self.marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert processes_with_marker(self.marker) == [], "a process of the run outlived it"
        leaked = {n for n in shm_entries() - self.shm_before if n.startswith(f"offpolicy_{self.proc.pid}_")}
        assert leaked == set(), f"leaked /dev/shm segments: {leaked}"


def _pid_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _final_checkpoint(run_dir: Path, err: str, summary: dict) -> dict:
    """The final checkpoint the message names: latest.pt, with summary.json's counters."""
    path = run_dir / "checkpoints" / f"step_{summary['env_steps']}.pt"
    assert f"its state intact: checkpoint {path}" in err or f"state was intact: checkpoint {path}" in err, err
    assert os.path.samefile(path, run_dir / "checkpoints" / "latest.pt")
    saved = load_checkpoint(path)
    assert saved["counters"] == {k: summary[k] for k in ("env_steps", "ticks", "updates", "policy_version")}
    return saved


def test_collector_killed_with_sigkill_while_the_learner_waits_keeps_the_work(tmp_path):
    """A slow collector: the learner waits for it nearly all the time, and notices the kill inside that wait."""
    run = CliRun(
        tmp_path,
        f"train.total_env_steps={LONG_RUN}",
        "+runtime.fault.collector_step_delay_s=0.3",
        "logger.interval_s=0.05",
    )
    pid = run.collector_pid()
    run.wait_for_env_steps(3 * 8)
    os.kill(pid, signal.SIGKILL)
    code, _, err, elapsed = run.finish()
    assert elapsed < 10
    assert code == ExitStatus.COLLECTOR_FAILED, err
    assert f"collector process {pid} was killed by SIGKILL at tick " in err
    assert (
        "while the learner waited for its observations" in err or "while the learner waited for its transition" in err
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] is False and summary["stop_reason"].startswith(f"collector process {pid} was killed")
    assert summary["env_steps"] >= 3 * 8
    _final_checkpoint(tmp_path, err, summary)
    run.assert_clean()


def test_collector_killed_during_an_update_phase_stops_it_between_two_updates_and_keeps_the_work(tmp_path):
    """Each update takes 1.5 s (a slow CPU): killed early in an update, the learner finishes that update, stops
    its phase there (the watchdog waits twice the last phase's time per update for it) and saves its state."""
    run = CliRun(
        tmp_path,
        f"train.total_env_steps={LONG_RUN}",
        "train.learning_starts=0",
        "algo.updates_per_step=2",
        "+algo.update_step_s=1.5",
        "logger.interval_s=0.01",
    )
    pid = run.collector_pid()
    run.wait_for_env_steps(8, timeout_s=60)  # the row of tick 1, written after its phase: tick 2's has begun
    time.sleep(0.3)  # inside its first update, over a second before that update ends
    os.kill(pid, signal.SIGKILL)
    code, _, err, elapsed = run.finish()
    assert code == ExitStatus.COLLECTOR_FAILED, err
    assert elapsed < 6, f"ended {elapsed:.1f} s after the kill"
    match = re.search(
        rf"collector process {pid} was killed by SIGKILL at tick (\d+), during the learner's update phase\n", err
    )
    assert match, err
    stopped = re.search(r"the learner stopped its update phase between two updates \((\d) of 2 applied\)", err)
    assert stopped, err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] is False and summary["stop_reason"] == match.group(0).rstrip()
    # the phases of the ticks before, whole, and the updates of the stopped phase that ran: nothing half-applied
    assert summary["updates"] == 2 * int(match.group(1)) + int(stopped.group(1))
    _final_checkpoint(tmp_path, err, summary)
    run.assert_clean()


def test_collector_raising_inside_step(tmp_path):
    run = CliRun(tmp_path, f"train.total_env_steps={LONG_RUN}", "+runtime.fault.collector_raise_at_tick=30")
    pid = run.collector_pid()
    code, _, err, elapsed = run.finish()
    assert elapsed < 10
    assert code == ExitStatus.COLLECTOR_FAILED, err
    assert (
        "run failed: collector raised InjectedFault: injected fault in env.step (runtime.fault.collector_raise_at_tick=30) at tick 30"
        in err
    )
    assert "--- collector traceback ---" in err and "Traceback (most recent call last)" in err
    assert "collector.py" in err and ", in step" in err  # the collector's own frames, down into step
    assert _pid_gone(pid)
    run.assert_clean()


def test_collector_hanging_past_its_timeout(tmp_path):
    run = CliRun(
        tmp_path,
        f"train.total_env_steps={LONG_RUN}",
        "+runtime.fault.collector_hang_at_tick=30",
        "runtime.collector_timeout_s=2.0",
    )
    pid = run.collector_pid()
    code, _, err, elapsed = run.finish()
    assert elapsed < 10
    assert code == ExitStatus.COLLECTOR_FAILED, err
    assert "run failed: collector hung: tick 30 did not finish within 2.0 s" in err
    assert 'collector.py", line' in err and "in step" in err, "the hung collector's stack is dumped"
    assert _pid_gone(pid)
    run.assert_clean()


def test_learner_raising(tmp_path):
    run = CliRun(tmp_path, f"train.total_env_steps={LONG_RUN}", "+runtime.fault.learner_raise_at_tick=30")
    pid = run.collector_pid()
    code, _, err, elapsed = run.finish()
    assert elapsed < 10
    assert code == ExitStatus.LEARNER_FAILED, err
    assert (
        "run failed: learner raised InjectedLearnerFault: injected fault (runtime.fault.learner_raise_at_tick=30) at tick 30"
        in err
    )
    assert "--- learner traceback ---" in err
    assert _pid_gone(pid)
    run.assert_clean()


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, ExitStatus.SIGINT), (signal.SIGTERM, ExitStatus.SIGTERM)])
def test_interrupting_the_runner_keeps_its_work(tmp_path, signum, status):
    """A stop request ends the loop between ticks: summary, metric rows and a final checkpoint are written."""
    # a row every tick: the loop's last row is the tick the stop request ends
    run = CliRun(
        tmp_path, f"train.total_env_steps={LONG_RUN}", "logger.interval_env_steps=8", "train.learning_starts=200"
    )
    pid = run.collector_pid()
    time.sleep(1.5)
    run.proc.send_signal(signum)
    code, _, err, elapsed = run.finish()
    assert elapsed < 10
    assert code == status, err
    name = signal.Signals(signum).name
    summary = json.loads((tmp_path / "summary.json").read_text())
    # completed ticks, as summary.json counts them (the tick in progress when the request came is not)
    assert f"runner interrupted by {name} after {summary['ticks']} ticks ({summary['env_steps']} env steps)" in err
    assert "collector stopped, shared memory released" in err
    assert "Traceback" not in err  # a requested stop is not a crash
    assert _pid_gone(pid)
    run.assert_clean()
    assert summary["completed"] is False and summary["stop_reason"] == name
    final = tmp_path / "checkpoints" / f"step_{summary['env_steps']}.pt"
    assert f"resume with train.resume={final}" in err  # the message says where to resume from
    assert os.path.samefile(final, tmp_path / "checkpoints" / "latest.pt")
    saved = load_checkpoint(final)
    assert saved["counters"]["env_steps"] == summary["env_steps"] > 0
    assert saved["counters"]["updates"] == summary["updates"] > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) >= 2 and rows[-1]["env_steps"] == summary["env_steps"]  # rows of the loop, then flushed
    steps = [row["env_steps"] for row in rows]
    assert steps == sorted(steps)  # never back (W&B drops a row whose step went back)
    assert not (tmp_path / "collector.pid").exists()


def test_sigterm_to_the_whole_process_group_keeps_the_work_too(tmp_path):
    """Slurm (and `timeout`) signal every process of the job, here while the learner is inside a long update
    phase: the collector must outlive it, so the learner stops at the next tick boundary with its state intact."""
    run = CliRun(
        tmp_path,
        f"train.total_env_steps={LONG_RUN}",
        "train.learning_starts=0",
        "+runtime.fault.learner_sleep_at_tick=20",
        "+runtime.fault.learner_sleep_s=4",
        "logger.interval_s=0.05",
        own_group=True,
    )
    pid = run.collector_pid()
    run.wait_for_env_steps(10 * 8)
    time.sleep(1.0)  # inside the 4-s phase of tick 20 now
    os.killpg(run.proc.pid, signal.SIGTERM)
    code, _, err, elapsed = run.finish()
    assert code == ExitStatus.SIGTERM and elapsed < 10, err
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stop_reason"] == "SIGTERM" and summary["env_steps"] > 0
    assert (tmp_path / "checkpoints" / f"step_{summary['env_steps']}.pt").exists()
    assert _pid_gone(pid)
    run.assert_clean()


def test_resuming_an_interrupted_run_carries_its_counters_on(tmp_path):
    first = CliRun(tmp_path / "first", f"train.total_env_steps={LONG_RUN}", "train.learning_starts=200")
    first.collector_pid()
    time.sleep(1.0)
    first.proc.send_signal(signal.SIGINT)
    assert first.finish()[0] == ExitStatus.SIGINT
    stopped = json.loads((tmp_path / "first" / "summary.json").read_text())
    target = stopped["env_steps"] + 80
    second = CliRun(
        tmp_path / "second",
        f"train.total_env_steps={target}",
        "train.learning_starts=40",
        f"train.resume={tmp_path / 'first' / 'checkpoints' / 'latest.pt'}",
    )
    code, out, err, _ = second.finish(timeout_s=60)
    assert code == 0, err
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    assert summary["completed"] and summary["env_steps"] == target
    assert summary["resumed_from_env_steps"] == stopped["env_steps"]
    assert summary["updates"] > stopped["updates"] and summary["policy_version"] > stopped["policy_version"]
    assert f"resumed from {tmp_path / 'first' / 'checkpoints' / 'latest.pt'} at {stopped['env_steps']} env steps" in (
        out + err
    )


def test_watchdog_interrupts_a_phase_that_reaches_no_safe_point_in_time_and_says_so(tmp_path):
    """The learner sleeps 60 s inside an update phase (no safe point, like a compile warm-up); the collector is
    killed during it: the watchdog waits its shortest grace for a safe point, then interrupts; no checkpoint."""
    run = CliRun(
        tmp_path,
        f"train.total_env_steps={LONG_RUN}",
        "+runtime.fault.learner_sleep_at_tick=20",
        "+runtime.fault.learner_sleep_s=60",
        "logger.interval_s=0.05",
        "train.learning_starts=0",
    )
    pid = run.collector_pid()
    run.wait_for_env_steps(10 * 8)
    time.sleep(2.0)  # ticks take milliseconds: the learner is well inside the 60-s phase of tick 20 now
    os.kill(pid, signal.SIGKILL)
    code, _, err, elapsed = run.finish(timeout_s=30)
    assert code == ExitStatus.COLLECTOR_FAILED, err
    grace = SAFE_POINT_GRACE_S[0]
    # the phase sleeps 60 s and the longest grace is SAFE_POINT_GRACE_S[1] (10 s): ending within 8 s shows that the
    # sleep was interrupted after the shortest grace; the rest of the margin is the exit's teardown, which takes a
    # few seconds on a 2-core machine whose cores are both busy with other work
    assert SAFE_POINT_GRACE_S[1] >= 8.0 and elapsed < 8.0, f"ended {elapsed:.1f} s after the kill"
    assert (
        f"collector process {pid} was killed by SIGKILL at tick 20, during the learner's update phase, "
        f"which reached no safe point within {grace:.1f} s\n"
    ) in err
    assert (
        "no final checkpoint: the learner was stopped inside an update phase, part of its updates applied; "
        "none was written"
    ) in err
    assert not (tmp_path / "checkpoints").exists()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["completed"] is False and "reached no safe point" in summary["stop_reason"]
    run.assert_clean()


def test_a_collector_that_finished_its_ticks_and_left_is_not_a_failure(tmp_path):
    """The collector exits as soon as its last transition is consumed; a slow learner after that ends cleanly."""
    run = CliRun(
        tmp_path,
        "train.total_env_steps=800",  # 100 ticks of 8 envs
        "+runtime.fault.learner_sleep_at_tick=100",  # after the last transition, while the watchdog still watches
        "+runtime.fault.learner_sleep_s=1.0",
    )
    code, _, err, _ = run.finish(timeout_s=120)
    assert code == 0, err
    assert json.loads((tmp_path / "summary.json").read_text())["completed"] is True
    run.assert_clean()


def test_collector_failing_to_build_its_env(tmp_path):
    # (an unknown env.name is refused before the collector starts: offpolicy.config)
    run = CliRun(tmp_path, "train.total_env_steps=800", "+runtime.env_factory=envs:no_such_factory")
    code, _, err, elapsed = run.finish()
    assert code == ExitStatus.COLLECTOR_FAILED, err
    assert "run failed: collector raised AttributeError: module 'envs' has no attribute 'no_such_factory'" in err
    run.assert_clean()


def test_runner_killed_with_sigkill_takes_the_collector_with_it(tmp_path):
    """The learner side dying without any cleanup: the collector notices it was orphaned and leaves."""
    run = CliRun(tmp_path, f"train.total_env_steps={LONG_RUN}")
    pid = run.collector_pid()
    time.sleep(0.5)
    run.proc.kill()
    run.finish()
    deadline = time.monotonic() + 10
    while not _pid_gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pid_gone(pid), "the orphaned collector kept running"
    run.assert_clean()
