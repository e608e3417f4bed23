"""Setup as the README tells it: the Makefile's torch, `make train`, the README's own commands, a self-contained repo."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from offpolicy.config import validate_train_config

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def fake_python(path: Path, log: Path, real: str | None) -> Path:
    """A venv's `bin/python` that records every call; `-c` runs `real` (a python with torch) or fails (none)."""
    path.parent.mkdir(parents=True)
    run_c = f'exec "{real}" "$@"' if real else "exit 1"
    path.write_text(f'#!/bin/sh\necho "$*" >> "{log}"\nif [ "$1" = "-c" ]; then {run_c}; fi\nexit 0\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def make(*args: str) -> subprocess.CompletedProcess:
    """`make -C <repo> <args>`, free of the settings of a `make test` this suite may run under."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    return subprocess.run(["make", "-C", str(REPO), *args], env=env, capture_output=True, text=True, timeout=300)


@needs_make
def test_makefile_keeps_a_torch_that_fits(tmp_path):
    log = tmp_path / "calls"
    fake_python(tmp_path / "venv" / "bin" / "python", log, real=sys.executable)
    proc = make("torch", f"VENV={tmp_path / 'venv'}")
    assert proc.returncode == 0, proc.stderr
    import torch

    assert f"using the installed torch {torch.__version__}" in proc.stdout
    assert not [line for line in log.read_text().splitlines() if line.startswith("-m pip")]


@needs_make
@pytest.mark.parametrize(
    "index,expected",
    [
        (None, "-m pip install -q torch==2.13.0"),  # pip's default index: on PyPI for Linux x86-64, the CUDA build
        ("https://download.pytorch.org/whl/cpu", "-m pip install -q torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"),
    ],
)  # fmt: skip
def test_makefile_installs_torch_from_the_index_it_is_given(tmp_path, index, expected):
    """Was: a fixed pin said to be a CPU build, which it is only where pip's configuration provides one."""
    log = tmp_path / "calls"
    fake_python(tmp_path / "venv" / "bin" / "python", log, real=None)
    proc = make("torch", f"VENV={tmp_path / 'venv'}", *([f"TORCH_INDEX_URL={index}"] if index else []))
    assert proc.returncode == 0, proc.stderr
    pip_calls = [line for line in log.read_text().splitlines() if line.startswith("-m pip")]
    assert pip_calls == [expected]


@needs_make
def test_make_train_passes_arguments_and_reports_the_runs_status(tmp_path):
    """Make cannot hand on the run's exit status: it names it in its Error line and exits 2 (as the README says)."""
    missing = tmp_path / "missing.pt"
    args = f"logger=none train.resume={missing} hydra.run.dir={tmp_path / 'run'}"
    # -o: the venv counts as installed (this test runs inside it)
    proc = make("-o", ".venv/.installed", "train", f"PY={sys.executable}", f"ARGS={args}")
    assert proc.returncode == 2
    assert f"[offpolicy] checkpoint not found: {missing}" in proc.stderr  # the run's own line (its status 5)
    assert re.search(r"make: \*\*\* \[Makefile:\d+: train\] Error 5", proc.stderr)
    assert "Error N" in README and "itself exits with 2" in README


def runs_pip(python: Path) -> bool:
    return subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, timeout=120).returncode == 0


@needs_make
def test_a_setup_interrupted_while_it_makes_the_venv_repairs_itself(tmp_path):
    """Was: Ctrl-C during the first `make` left a venv without pip, and every later make failed
    (`No module named pip`) until `make clean`."""
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")}
    cmd = ["make", "-C", str(REPO), "venv", f"VENV={venv}", f"PYTHON={sys.executable}"]
    # Ctrl-C's default action even where this test's own process ignores SIGINT (started in the background)
    first = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not python.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(first.pid, signal.SIGINT)  # as Ctrl-C in a terminal: make and all it started, while pip installs
    assert first.wait(60) != 0
    assert python.exists() and not runs_pip(python), "the interrupt came too late: pip was installed already"

    proc = make("venv", f"VENV={venv}", f"PYTHON={sys.executable}")
    assert proc.returncode == 0, proc.stderr
    assert runs_pip(python)
    assert f"{sys.executable} -m venv --clear {venv}" in proc.stdout.splitlines()
    # the full setup starts with the same step
    (recipe,) = [line for line in make("-n", "venv", f"VENV={venv}").stdout.splitlines() if "venv" in line]
    assert recipe in make("-n", f"VENV={venv}", f"{venv}/.installed").stdout.splitlines()


@needs_make
def test_a_venv_that_runs_pip_is_kept(tmp_path):
    """The venv step leaves a working venv (a user's, or one made with VENV_ARGS) as it is."""
    log = tmp_path / "calls"
    fake_python(tmp_path / "venv" / "bin" / "python", log, real=None)  # `-m pip --version` exits 0
    base = fake_python(tmp_path / "base" / "bin" / "python", tmp_path / "base_calls", real=None)
    proc = make("venv", f"VENV={tmp_path / 'venv'}", f"PYTHON={base}")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "base_calls").exists()  # no venv made
    assert log.read_text().splitlines() == ["-m pip --version"]


def readme_lines() -> list[str]:
    """The lines of the README's bash blocks, continuation lines joined."""
    blocks = re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    return [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]


def readme_commands(module: str) -> list[list[str]]:
    """The arguments of every `python -m <module> ...` command in the README, comments cut."""
    commands = []
    for line in readme_lines():
        words = shlex.split(re.sub(r"<[^>]*>", "placeholder", line), comments=True)  # `<run dir>`
        if words[:3] == ["python", "-m", module]:
            commands.append(words[3:])
    return commands


def test_readme_smoke_run_learns(tmp_path):
    """Was: 2,000 env steps under the default learning_starts of 10,000, so not one update."""
    (smoke,) = [line for line in readme_lines() if line.endswith("# smoke run on a CPU")]
    words = shlex.split(smoke, comments=True)
    assert words[:3] == ["python", "-m", "offpolicy.train"]
    run_dir = tmp_path / "run"
    cmd = [sys.executable, *words[1:], f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 2000 and summary["updates"] == 250
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last_train = [r for r in rows if "train/updates" in r][-1]  # the final snapshot's row comes after it
    assert any(key.startswith("loss/") for key in last_train)


def test_readme_train_examples_are_valid_configs():
    """Each single-run train example of the README composes and passes validation (sweeps: their first point)."""
    commands = readme_commands("offpolicy.train")
    assert len(commands) >= 8
    for words in commands:
        if any(word.startswith("hydra.searchpath=") for word in words):
            continue  # the Extending examples' configs: tests/workflow/test_extending.py
        overrides = []
        for word in words:
            if word in ("-m", "--cfg", "job") or word.startswith(("hydra", "hydra/")):
                continue
            key, _, value = word.partition("=")
            if "," in value and not value.startswith("["):
                value = value.split(",")[0]  # a sweep: its first point
            overrides.append(f"{key}={value}")
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            cfg = compose(config_name="config", overrides=overrides)
        validate_train_config(cfg)


def test_the_repository_stands_alone():
    """Was: links into a folder next to the repository that a clone does not have, and a design doc cited but missing."""
    listed = ["git", "ls-files", "--cached", "--others", "--exclude-standard"]  # tracked, or new and not ignored
    files = subprocess.run(listed, cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    texts = {
        name: (REPO / name).read_text(errors="replace")
        for name in files
        if (REPO / name).is_file() and not name.startswith("benchmark/outputs/")
    }
    outside = ".." + "/shared"  # spelled apart so that this file does not match itself
    assert not [name for name, text in texts.items() if outside in text]
    assert "docs/design.md" in texts
    for name, text in texts.items():
        if name.endswith(".md"):
            for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
                if not re.match(r"[a-z]+://", target):
                    assert (REPO / name).parent.joinpath(target).resolve().exists(), f"{name} links to {target}"
        for cited in re.findall(r"\b(docs/[\w./-]+\.md)", text):
            assert (REPO / cited).is_file(), f"{name} cites {cited}"


def test_the_package_holds_no_test_code():
    """The stand-in algorithm lives in tests/ and is loaded through runtime.algorithm_factory."""
    package = REPO / "offpolicy"
    assert not (package / "standin.py").exists()
    assert not [p for p in package.rglob("*.py") if "standin" in p.read_text()]
    assert (REPO / "tests" / "runtime" / "standin.py").is_file()
