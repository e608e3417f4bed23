"""Helpers of the NpEnv-overhead benchmark: timed block sizes, and a tiny real DMC run replaying all its pools."""

from __future__ import annotations

import os

import envs
from benchmark.env.benchmark_np_env_overhead import SUITES, measure, steps_per_block


def test_steps_per_block_fits_the_block_time_within_bounds():
    assert steps_per_block(0.010, 1.0, None) == 100
    assert steps_per_block(0.080, 1.0, None) == 12
    assert steps_per_block(2.0, 1.0, None) == 3  # a few steps even when one is slow
    assert steps_per_block(1e-6, 1.0, None) == 200
    assert steps_per_block(0.080, 1.0, 40) == 40  # --steps wins


def test_suites_name_registered_tasks():
    assert set(SUITES["dmc"]) <= set(envs.registry_names()) and set(SUITES["gymnasium"]) <= set(envs.registry_names())


def test_dmc_row_replays_the_sensor_pool_too():
    cpu = sorted(os.sched_getaffinity(0))[-1:]
    row = measure("dmc_hopper_hop", num_envs=4, cpus=cpu, steps=3, blocks=1)
    assert row["substeps"] == 4 and row["obs_dim"] == 15 and row["steps_per_block"] == 3
    # the bare side ran the position/velocity refresh as well as the substeps
    assert 0.0 < row["bare_share_forward"] < 1.0 and row["share_pool_forward"] > 0.0
    assert row["bare_pool_steps_per_s"] > 0 and row["reset_all_ms"] > 0
    # every step's reward was deferred and timed apart
    assert row["deferred_step_share"] == 1.0 and row["deferred_ms_per_vector_step"] > 0.0
    total = row["critical_task_side_ms_per_vector_step"] + row["deferred_ms_per_vector_step"]
    assert abs(total - row["task_side_ms_per_vector_step"]) < 1e-9
    # the critical-path overhead leaves the deferred part out of NpEnv's time against the same bare physics
    critical = (row["np_env_ms_per_vector_step"] - row["deferred_ms_per_vector_step"]) / row["bare_ms_per_vector_step"]
    assert abs(row["critical_overhead"] - (critical - 1.0)) < 1e-9 and row["critical_overhead"] < row["overhead"]
    # resets per step over a 1000-step episode: all 4 rows at once per episode, or 4 one-row resets spread over it
    assert row["reset_row_ms"] > 0.0
    assert abs(row["synchronised_reset_ms_per_vector_step"] - row["reset_all_ms"] / 1000) < 1e-12
    assert abs(row["staggered_reset_ms_per_vector_step"] - 4 * row["reset_row_ms"] / 1000) < 1e-12
    share = row["staggered_reset_ms_per_vector_step"] / row["bare_ms_per_vector_step"]
    assert abs(row["staggered_reset_share"] - share) < 1e-12
