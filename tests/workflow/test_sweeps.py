"""Sweeps: CPU blocks for jobs that share a machine, and two-job sweeps through joblib and submitit_local."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from sizes import TINY_HOPPER_CLI

from offpolicy.affinity import AffinityError, CpuBlockLease, launcher_kind, plan_job_blocks, split_blocks

REPO = Path(__file__).resolve().parents[2]
JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"
SUBMITIT_LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
SUBMITIT_SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"
BASIC = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def test_launcher_names():
    assert [launcher_kind(t) for t in (BASIC, JOBLIB, SUBMITIT_LOCAL, SUBMITIT_SLURM, None)] == [
        "basic",
        "joblib",
        "submitit_local",
        "submitit_slurm",
        "basic",
    ]


def test_joblib_splits_cpus_into_disjoint_blocks():
    cpus = list(range(16))
    assert plan_job_blocks("joblib", {"n_jobs": 4}, cpus) == [
        (0, 1, 2, 3),
        (4, 5, 6, 7),
        (8, 9, 10, 11),
        (12, 13, 14, 15),
    ]
    blocks = plan_job_blocks("joblib", {"n_jobs": 3}, [2, 3, 5, 7, 11, 13, 17])
    assert blocks == [(2, 3, 5), (7, 11), (13, 17)]
    with pytest.raises(AffinityError, match="runs 13 jobs at once"):
        plan_job_blocks("joblib", {"n_jobs": -4}, cpus)
    assert plan_job_blocks("joblib", {"n_jobs": -9}, cpus) == split_blocks(cpus, 8)  # joblib: -k = cpus + 1 - k
    assert plan_job_blocks("joblib", {"n_jobs": 1}, cpus) is None  # one at a time: the whole machine


def test_joblib_with_too_few_cpus_fails_with_the_numbers():
    with pytest.raises(AffinityError) as err:
        plan_job_blocks("joblib", {"n_jobs": -1}, [0, 1])
    message = str(err.value)
    assert "\n" not in message
    assert "runs 2 jobs at once" in message and "only 2 are available [0, 1]" in message
    assert "hydra.launcher.n_jobs=1" in message
    with pytest.raises(AffinityError, match="n_jobs=3"):
        plan_job_blocks("joblib", {"n_jobs": 5}, list(range(7)))


def test_submitit_local_blocks_follow_cpus_per_task():
    cpus = list(range(8))
    assert plan_job_blocks("submitit_local", {"cpus_per_task": None}, cpus) == [tuple(cpus)]
    assert plan_job_blocks("submitit_local", {"cpus_per_task": 3}, cpus) == [
        (0, 1, 2, 3),
        (4, 5, 6, 7),
    ]  # spare CPUs shared out
    assert plan_job_blocks("submitit_local", {"cpus_per_task": 4}, cpus) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    with pytest.raises(AffinityError, match="cpus_per_task=16"):
        plan_job_blocks("submitit_local", {"cpus_per_task": 16}, cpus)
    assert plan_job_blocks("basic", {}, cpus) is None and plan_job_blocks("submitit_slurm", {}, cpus) is None


def test_leases_are_exclusive_and_freed_on_release(tmp_path):
    blocks = [(0, 1), (2, 3)]
    first, second = CpuBlockLease(blocks, tmp_path), CpuBlockLease(blocks, tmp_path)
    assert first.acquire() == (0, 1) and second.acquire() == (2, 3)
    third = CpuBlockLease(blocks, tmp_path, first=1)
    waited = []
    t0 = time.monotonic()

    import threading

    threading.Timer(0.3, second.release).start()
    assert third.acquire(poll_s=0.05, on_wait=lambda: waited.append(True)) == (2, 3)
    assert waited == [True] and time.monotonic() - t0 >= 0.25
    first.release()
    third.release()
    assert CpuBlockLease(blocks, tmp_path).acquire() == (0, 1)


def test_a_dead_jobs_block_is_free_again(tmp_path):
    code = (
        "import sys, os; sys.path.insert(0, sys.argv[2]);"
        "from offpolicy.affinity import CpuBlockLease;"
        "CpuBlockLease([(0, 1)], sys.argv[1]).acquire(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path), str(REPO)], check=True, timeout=60)
    assert CpuBlockLease([(0, 1)], tmp_path).acquire(poll_s=0.05) == (0, 1)


# --- two-job sweeps through the launchers (CI runs these) ----------------------------------------

TINY = [*TINY_HOPPER_CLI, "logger=none"]


def sweep(tmp_path: Path, *overrides: str, timeout: int = 300) -> tuple[subprocess.CompletedProcess, Path]:
    sweep_dir = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "offpolicy.train", "-m", *TINY, "seed=0,1", *overrides, f"hydra.sweep.dir={sweep_dir}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    return proc, sweep_dir


def job_outputs(sweep_dir: Path) -> list[dict]:
    """Both jobs finished their budget and left metrics, config and summary in their own dirs."""
    summaries = []
    for job in (0, 1):
        run_dir = sweep_dir / str(job)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["completed"] and summary["env_steps"] == 200
        assert OmegaConf.load(run_dir / "config_resolved.yaml").seed == job
        rows = (run_dir / "metrics.csv").read_text().splitlines()
        assert rows[0].startswith("env_steps,time/elapsed_s,") and rows[-1].startswith("200,")
        summary["run_info"] = json.loads((run_dir / "run_info.json").read_text())
        summaries.append(summary)
    return summaries


def test_joblib_sweep(tmp_path):
    """Through hydra-joblib-launcher: in parallel with disjoint CPU blocks where the machine has 4+ CPUs,
    else one job at a time (n_jobs=1) since two parallel jobs would need 4 CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    n_jobs = 2 if len(cpus) >= 4 else 1
    proc, sweep_dir = sweep(tmp_path, "hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    first, second = job_outputs(sweep_dir)
    assert first["run_info"]["launcher"] == "joblib"
    if n_jobs == 2:
        blocks = [set(s["run_info"]["cpu_block"]) for s in (first, second)]
        assert blocks[0].isdisjoint(blocks[1])
        for s, block in zip((first, second), blocks):
            assert set(s["learner_cpus"]) | set(s["collector_cpus"]) <= block
    else:
        assert first["run_info"]["cpu_block"] is None  # one job at a time: the whole machine


def test_joblib_with_too_few_cpus_is_one_clear_line(tmp_path):
    n_cpus = len(os.sched_getaffinity(0))
    proc, sweep_dir = sweep(tmp_path, "hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_cpus}")
    if n_cpus == 1:
        pytest.skip("one CPU: n_jobs=1 needs no plan")
    assert proc.returncode == 2
    # once for the sweep (was: once per job), before any job ran: no job dirs, no sweep dir at all
    (line,) = proc.stderr.splitlines()
    assert line.startswith("[offpolicy] invalid config: hydra/launcher=joblib")
    assert f"runs {n_cpus} jobs at once" in line and f"only {n_cpus} are available" in line
    assert line.endswith(f"set hydra.launcher.n_jobs={max(1, n_cpus // 2)}")
    assert not sweep_dir.exists()


def test_submitit_local_sweep(tmp_path):
    """Through hydra-submitit-launcher's local executor: each job its own process, CPU blocks leased per job."""
    proc, sweep_dir = sweep(tmp_path, "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=10")
    assert proc.returncode == 0, proc.stderr[-4000:]
    first, second = job_outputs(sweep_dir)
    assert first["run_info"]["launcher"] == "submitit_local"
    # cpus_per_task unset: a job's block is every CPU, so the second job waited for the first to finish
    assert first["run_info"]["cpu_block"] == second["run_info"]["cpu_block"] == sorted(os.sched_getaffinity(0))
    # the job that started second (wrote run_info.json, after its lease) did so after the first one finished
    infos = sorted((sweep_dir / str(job) / "run_info.json").stat().st_mtime_ns for job in (0, 1))
    ends = {job: (sweep_dir / str(job) / "summary.json").stat().st_mtime_ns for job in (0, 1)}
    first_job = min((0, 1), key=lambda job: (sweep_dir / str(job) / "run_info.json").stat().st_mtime_ns)
    assert ends[first_job] <= infos[1]
    logs = sorted((sweep_dir / ".submitit").glob("*/*_log.out"))
    assert len(logs) == 2 and all("Job completed successfully" in p.read_text() for p in logs)
    assert len({s["collector_pid"] for s in (first, second)}) == 2
