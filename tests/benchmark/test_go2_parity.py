"""benchmark/env/go2_parity.py without UniLab: its hand-built states are what they claim in plain MuJoCo, our
env's terms on them match values worked out by hand, and the committed report holds every term within its
tolerance for these very states. The live comparison runs only where `UNILAB_PYTHON` names an interpreter
that imports unilab."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmark.env import go2_parity
from benchmark.env.go2_parity import (
    CONTACT_PATTERNS,
    FEET,
    PENETRATION,
    PHASE_STEPS,
    TERMS,
    build_inputs,
    build_states,
    contact_flags,
    contact_pose,
    feet_at_height,
    foot_bottoms,
    forward,
    load_model,
    our_terms,
    plain_reads,
)
from envs.locomotion.go2_joystick import REWARD_SCALES, feet_phase, next_phase

REPO = Path(__file__).resolve().parents[2]
REPORT = REPO / "benchmark/outputs/checks/parity.json"


@pytest.fixture(scope="module")
def model():
    return load_model()


@pytest.mark.parametrize("down", CONTACT_PATTERNS)
def test_contact_pose_puts_down_exactly_the_named_feet(model, down):
    qpos = contact_pose(model, down, yaw=0.4)
    assert contact_flags(model, qpos).tolist() == [bool(d) for d in down]
    bottoms = foot_bottoms(model, qpos)
    for is_down, z in zip(down, bottoms, strict=True):
        assert (-0.02 < z <= -PENETRATION + 1e-12) if is_down else z > 0.01
    data = forward(model, qpos, np.zeros(model.nv))
    assert data.ncon == sum(down)  # nothing but the named feet touches the floor


def test_feet_at_height_holds_the_foot_position_sensors_there(model):
    for h in (0.02, 0.1, 0.25):
        data = forward(model, feet_at_height(model, h), np.zeros(model.nv))
        z = [data.sensor(f"{f}_pos").data[2] for f in FEET]
        assert np.mean(z) == pytest.approx(h, abs=1e-9) and np.ptp(z) < 0.02
        if h >= 0.1:  # lower, the feet (0.022 m spheres) reach the floor
            assert data.ncon == 0


def test_gait_clocks_cover_the_whole_cycle():
    phases, ph, k = {}, np.float32(0.0), 0
    for target in sorted(PHASE_STEPS):
        while k < target:
            ph, k = next_phase(ph, 0.02), k + 1
        phases[target] = float(ph)
    for k, value in phases.items():
        wrapped = abs((value - 0.04 * k + 0.5) % 1.0 - 0.5)
        assert wrapped < 2e-3, (k, value)  # 0.04 per step, float32 drift even 12345 steps on
    swinging = {tuple(feet_phase(np.float32(v)) >= 0.6) for v in phases.values()}
    assert swinging == {(False,) * 4, (True, False, False, True), (False, True, True, False)}


def test_our_terms_on_the_contact_states_match_hand_computed_values(model):
    n = len(CONTACT_PATTERNS)
    qpos, qvel, _ = build_states(model, 0)
    qpos, qvel = qpos[:n], qvel[:n]
    inputs = build_inputs(model, qpos, qvel, 0)
    pick = [PHASE_STEPS.index(0), PHASE_STEPS.index(20)]
    inputs = {k: v[pick] for k, v in inputs.items()}
    ours = our_terms(qpos, qvel, inputs)
    down = np.asarray(CONTACT_PATTERNS, dtype=bool)
    # clock 0: every foot in stance; clock 20 (phase 0.8): FL and RR swing, FR and RL in stance
    np.testing.assert_allclose(ours["term/contact"][0], down.mean(axis=1))
    stance = np.array([False, True, True, False])
    np.testing.assert_allclose(ours["term/contact"][1], (down == stance).mean(axis=1))
    np.testing.assert_allclose(ours["term/swing_feet_z"][0], 0.0)
    rows = np.arange(n)
    tracked, unchanged = rows % 4 == 1, (rows % 5 == 0) | (rows % 7 == 0)
    np.testing.assert_allclose(ours["term/tracking_lin_vel"][:, tracked], 1.0, atol=1e-12)
    np.testing.assert_allclose(ours["term/tracking_ang_vel"][:, tracked], 1.0, atol=1e-12)
    assert np.all(ours["term/action_rate"][:, unchanged] == 0.0) and np.all(ours["term/action_rate"][:, ~unchanged] > 0)
    # UniLab's tracking width as its classes read it (base.yaml's tracking_sigma), on plain MuJoCo's sensors
    reads = plain_reads(model, qpos, qvel)
    lin, yaw = reads["sensor/local_linvel"][:, :2], reads["sensor/gyro"][:, 2]
    cmd = inputs["command"]
    np.testing.assert_allclose(ours["term/tracking_lin_vel"], np.exp(-np.sum((cmd[..., :2] - lin) ** 2, -1) / 0.5))
    np.testing.assert_allclose(ours["term/tracking_ang_vel"], np.exp(-((cmd[..., 2] - yaw) ** 2) / 0.5))
    weighted = sum(ours[f"term/{k}"] * REWARD_SCALES[k] for k in TERMS)
    np.testing.assert_allclose(ours["reward"], weighted * 0.02, rtol=1e-6)


def test_committed_report_is_within_tolerance_for_these_states(model):
    report = json.loads(REPORT.read_text())[go2_parity.KEY]
    _, _, labels = build_states(model, report["settings"]["seed"])
    states = report["states"]
    assert states["labels"] == labels and states["gait_clocks"] == list(PHASE_STEPS)
    assert states["contact_flags"][: len(CONTACT_PATTERNS)] == [list(p) for p in CONTACT_PATTERNS]
    assert states["feet_down_counts"] == [0, 1, 2, 3, 4]
    assert states["rows_compared"] == len(labels) * len(PHASE_STEPS)
    tol, diffs = report["tolerance"], report["max_abs_diff"]
    assert tol <= 1e-5 and report["within_tolerance"] is True
    assert set(diffs["terms"]) == set(diffs["weighted"]) == set(TERMS)
    for group in ("terms", "weighted"):
        for name, value in diffs[group].items():
            assert value <= tol, (group, name, value)
    assert diffs["reward"] <= tol and diffs["terminated_disagreements"] == 0
    assert len(diffs["observation"]["actor"]) == 7 and len(diffs["observation"]["critic"]) == 8
    for group in diffs["observation"].values():
        assert all(v <= tol for v in group.values()), group
    # the states exercised each term: every contact fraction, both sides of the tilt limit
    coverage = diffs["coverage"]
    assert coverage["contact"]["distinct"] == 5 and coverage["swing_feet_z"]["max"] > 0.4
    assert 0 < coverage["terminated_rows"] < states["rows_compared"]
    assert report["unilab"]["weights"] == REWARD_SCALES
    assert report["unilab"]["unilab"] == "1.5.2" and "std" in report["unilab"]["composed_reward_error"]


def test_live_parity_with_unilab(tmp_path):
    python = os.environ.get("UNILAB_PYTHON")
    if not python or subprocess.run([python, "-c", "import unilab"], capture_output=True).returncode:
        pytest.skip("no interpreter with unilab (set UNILAB_PYTHON)")
    out = tmp_path / "go2_parity.json"
    cmd = [sys.executable, "-m", "benchmark.env.go2_parity", "--unilab-python", python, "--out", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    report = json.loads(out.read_text())[go2_parity.KEY]
    assert report["within_tolerance"] is True, report["max_abs_diff"]
