"""torch.compile's kernel-compile workers run on the learner's and the collector's CPUs, the learner stays pinned.

Each case runs in a fresh interpreter: Inductor's pool is created once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
import json, os, sys
from offpolicy.affinity import pin_process
from offpolicy.algorithms.capture import start_compile_workers

cpus = sorted(os.sched_getaffinity(0))
started = start_compile_workers(cpus)
pin_process(cpus[:1])  # what the runner does next: the learner on its own CPU
if started:
    from torch._inductor.async_compile import AsyncCompile
    AsyncCompile.wait_pool_ready(timeout=120)  # the workers answered a job

def children(pid):
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(c) for c in f.read().split()]
    return out

def allowed(pid):
    return sorted(os.sched_getaffinity(pid))

descendants, todo = [], children(os.getpid())
while todo:
    pid = todo.pop()
    descendants.append(pid)
    todo += children(pid)
print(json.dumps({
    "started": started,
    "learner": allowed(0),
    "descendants": {str(p): allowed(p) for p in descendants},
}))
sys.stdout.flush()
os._exit(0)  # skip Inductor's pool shutdown: the probe only reads
"""


def _probe(env_extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_COMPILE_THREADS"}
    env.update(PYTHONPATH=str(REPO), **env_extra)
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one pinned learner CPU, one more")
def test_compile_workers_use_every_run_cpu_while_the_learner_stays_pinned():
    cpus = sorted(os.sched_getaffinity(0))
    out = _probe({})
    assert out["started"] == min(32, len(cpus))
    assert out["learner"] == cpus[:1]
    # the pool's sidecar and its workers (one per CPU) may run on all of the run's CPUs
    assert len(out["descendants"]) >= 1 + len(cpus)
    assert all(mask == cpus for mask in out["descendants"].values()), out


def test_compile_threads_from_the_environment_win():
    out = _probe({"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert out["started"] == 0
    assert out["descendants"] == {}
