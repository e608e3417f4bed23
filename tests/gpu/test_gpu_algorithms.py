"""The path every published result uses, on CUDA: torch.compile + CUDA graphs + autocast, against eager.

Run with `python -m pytest -m gpu` (deselected by default; skipped without CUDA). For each
algorithm in fp32 and in its published autocast dtype (FastSAC bf16, FlashSAC fp16 with loss
scaling), two copies start from the same state and see the same batches: an eager one
(`compile=false, cuda_graphs=false`) and the production one (`compile=true, cuda_graphs=true`).
Inductor is told to draw random numbers with the eager kernels (`fallback_random`), and the CUDA
generator is reseeded before every call, so both copies sample the same noise and any
difference is arithmetic: fused kernels round differently, most of all in bf16/fp16.

Tolerances, about ten times what an H200 showed (torch 2.11; printed with `-s`, the log at commit
f470913 in benchmark/outputs/gpu_tests/), room for other GPUs and versions while a real error (a missing
step, a wrong sign, a skipped graph node) moves things by orders of magnitude more:
- Losses, phase by phase (absolute below 1): relative 1e-5 in fp32 (seen <= 1e-6: fused kernels
  reorder sums), 1e-2 in bf16 (seen 9e-4: 8 mantissa bits round where fusion puts the casts),
  1e-3 in fp16 (seen 4e-5: 11 mantissa bits).
- Parameters after the phases: |theta_compiled - theta_eager| against how far training moved
  them, |theta_eager - theta_start|: 5e-3 in fp32 (seen 6e-4), 2e-2 in bf16 (seen 1.3e-3), 5e-2
  in fp16 (seen 6.7e-3): Adam's sign-like steps turn a rounding flip of a near-zero gradient into
  a full lr-sized difference on that weight.
- Actions of the inference graph against eager `act`/`explore`: 1e-5 where inference runs in
  fp32 (FlashSAC's always does; seen <= 1.5e-6), 2e-2 in bf16 (FastSAC's actor runs under
  autocast; seen 2.5e-3).
- A policy restored from a checkpoint of the graph-captured run, run the same way: 1e-6.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from algo_stubs import FixedReplay, random_batch
from omegaconf import OmegaConf

from envs.core import EnvSpec
from offpolicy import checkpoint as ck
from offpolicy.algorithms import make_algorithm

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs CUDA"),
]

NUM_ENVS, OBS_DIM, ACTION_DIM = 16, 11, 3
SIZES = {
    "fastsac": dict(batch_size=256, critic_hidden_dim=128, actor_hidden_dim=64, updates_per_step=8),
    "flashsac": dict(
        batch_size=256, critic_hidden_dim=64, actor_hidden_dim=32, critic_num_blocks=1, actor_num_blocks=1,
        updates_per_step=2,
    ),
}  # fmt: skip
CASES = [("fastsac", "none"), ("fastsac", "bf16"), ("flashsac", "none"), ("flashsac", "fp16")]
PHASES = 5  # graph_warmup_calls=2 eager calls, the capture on the 3rd, replays after
LOSS_RTOL = {"none": 1e-5, "bf16": 1e-2, "fp16": 1e-3}
PARAM_DRIFT = {"none": 5e-3, "bf16": 2e-2, "fp16": 5e-2}
ACTION_ATOL = {"none": 1e-5, "bf16": 2e-2, "fp16": 1e-5}
# Exploring actions tanh(mean + std * eps) in bf16: one rounding of log_std (8-bit mantissa, ~2e-3 relative)
# moves the pre-tanh value by std * |eps| * |log_std| * 2e-3, up to ~4e-2 with std ~5 and |eps| ~3; the whole-tick
# graph measured 2.9e-2 against eager on the H200. A wrong row, noise or scaling differs by O(1).
EXPLORE_ATOL = {**ACTION_ATOL, "bf16": 5e-2}


def _spec() -> EnvSpec:
    ones = np.ones(ACTION_DIM, np.float32)
    return EnvSpec(
        "synthetic", NUM_ENVS, {"actor": OBS_DIM}, ACTION_DIM, -ones, ones, 0.01, 1000, reward_range=(-3.0, 3.0)
    )


def _build(name: str, amp: str, production: bool):
    cfg = {"name": name, **SIZES[name], "amp": amp, "compile": production, "cuda_graphs": production}
    return make_algorithm(OmegaConf.create(cfg), _spec(), "cuda")


def _params(algo) -> dict[str, torch.Tensor]:
    modules = {"actor": algo.actor, "critic": algo.critic, "target_critic": algo.target_critic}
    out = {f"{m}/{k}": v.detach().float().clone() for m, mod in modules.items() for k, v in mod.state_dict().items()}
    temperature = algo.log_alpha if algo.cfg.name == "fastsac" else algo.log_temp
    out["log_temperature"] = temperature.detach().clone()
    return out


@pytest.fixture(scope="module", autouse=True)
def eager_random_numbers():
    """Compiled code draws random numbers with the eager kernels, so both paths see the same noise.

    The suite compiles the same loss functions for several algorithm instances (each a guard
    failure and a recompile): a higher cache limit keeps Dynamo from quietly falling back to eager.
    """
    import torch._dynamo.config as dynamo_config
    import torch._inductor.config as inductor_config

    before = inductor_config.fallback_random, dynamo_config.cache_size_limit, dynamo_config.accumulated_cache_size_limit
    inductor_config.fallback_random = True
    dynamo_config.cache_size_limit = dynamo_config.accumulated_cache_size_limit = 256
    yield
    inductor_config.fallback_random, dynamo_config.cache_size_limit, dynamo_config.accumulated_cache_size_limit = before


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{a}" for n, a in CASES])
def trained(request):
    """An eager and a production copy of one algorithm after PHASES identical update phases."""
    name, amp = request.param
    torch.manual_seed(0)
    eager = _build(name, amp, production=False)
    production = _build(name, amp, production=True)
    production.load_state_dict(copy.deepcopy(eager.state_dict()))
    start = _params(eager)
    replay = FixedReplay(random_batch(_spec(), 8 * 256, seed=1).to("cuda"))
    k = eager.updates_per_step
    metrics = []
    for phase in range(PHASES):
        torch.cuda.manual_seed(1000 + phase)
        m_eager = eager.update_phase(replay, k)
        torch.cuda.manual_seed(1000 + phase)
        m_prod = production.update_phase(replay, k)
        metrics.append(({n: float(v) for n, v in m_eager.items()}, {n: float(v) for n, v in m_prod.items()}))
    torch.cuda.synchronize()
    return dict(name=name, amp=amp, eager=eager, production=production, start=start, replay=replay, metrics=metrics)


def test_compiled_graph_update_phases_match_eager(trained):
    name, amp, production = trained["name"], trained["amp"], trained["production"]
    assert production.use_compile and production.use_cuda_graphs and not production.graph_errors
    assert any(key[0] == "phase" for key in production._captured)  # the phases really ran as a graph
    worst = 0.0
    for phase, (m_eager, m_prod) in enumerate(trained["metrics"]):
        for key in ("loss/critic", "loss/actor", "loss/alpha", "train/q_mean"):
            e, p = m_eager[key], m_prod[key]
            rel = abs(p - e) / max(abs(e), 1.0)  # relative, absolute below 1 (q_mean starts at ~0)
            worst = max(worst, rel)
            assert rel <= LOSS_RTOL[amp], f"{name} {amp} phase {phase} {key}: eager {e:.6g}, compiled+graph {p:.6g}"
        assert m_prod["train/nonfinite_updates"] == 0.0
    eager_p, prod_p, start = _params(trained["eager"]), _params(production), trained["start"]
    drifts = {}
    for group in ("actor", "critic", "target_critic"):
        keys = [k for k in start if k.startswith(group + "/") and start[k].is_floating_point()]
        diff = torch.cat([(prod_p[k] - eager_p[k]).flatten() for k in keys]).norm()
        moved = torch.cat([(eager_p[k] - start[k]).flatten() for k in keys]).norm()
        drifts[group] = float(diff / moved)
        assert drifts[group] <= PARAM_DRIFT[amp], f"{name} {amp} {group}: drift {drifts[group]:.3g}"
    print(f"\n[gpu] {name} {amp}: worst loss rel diff {worst:.2e}; parameter drift {drifts}")


def test_a_non_finite_batch_is_skipped_inside_the_graph(trained):
    production, replay = trained["production"], trained["replay"]
    k, batch = production.updates_per_step, production.batch_size
    captured = dict(production._captured)
    reward = replay.batch.reward
    clean = reward.clone()
    state = {n: v.clone() for n, v in _params(production).items()}
    moments = copy.deepcopy(production.state_dict())
    reward[torch.arange(k, device="cuda") * batch + 3] = float("nan")  # one bad row in every update, in place
    for phase in (1, 2):  # replays of the captured graph on the poisoned storage; the streak runs across them
        metrics = production.update_phase(replay, k)
        torch.cuda.synchronize()
        assert float(metrics["train/nonfinite_updates"]) == k and int(production.nonfinite_streak) == phase * k
    assert dict(production._captured) == captured and not production.graph_errors
    after = _params(production)
    assert all(torch.equal(state[n], after[n]) for n in state), [
        n for n in state if not torch.equal(state[n], after[n])
    ]
    for opt in ("critic_opt", "actor_opt"):
        for pid, st in moments[opt]["state"].items():
            now = production.state_dict()[opt]["state"][pid]
            assert torch.equal(st["exp_avg"], now["exp_avg"]) and torch.equal(st["step"], now["step"]), opt
    reward.copy_(clean)
    metrics = production.update_phase(replay, k)
    assert float(metrics["train/nonfinite_updates"]) == 0.0 and int(production.nonfinite_streak) == 0
    print(
        f"\n[gpu] {trained['name']} {trained['amp']}: 2 x {k} poisoned updates skipped inside the graph, streak reset"
    )


def test_inference_graph_matches_eager_act_and_explore(trained):
    name, amp = trained["name"], trained["amp"]
    production = trained["production"]
    eager = _build(name, amp, production=False)
    eager.load_state_dict(copy.deepcopy(production.state_dict()))  # same parameters, fresh exploration state
    production.load_state_dict(copy.deepcopy(production.state_dict()))  # ... on both (drops captured graphs)
    gen = torch.Generator(device="cuda").manual_seed(7)
    worst_act = worst_explore = 0.0
    held, kept = None, 0
    for tick in range(6):  # 2 warm-up calls, the capture, then replays
        obs = {"actor": torch.randn(NUM_ENVS, OBS_DIM, device="cuda", generator=gen)}
        reset = torch.rand(NUM_ENVS, device="cuda", generator=gen) < 0.2
        a_graph, a_eager = production.act(obs), eager.act(obs)
        worst_act = max(worst_act, float((a_graph - a_eager).abs().max()))
        torch.testing.assert_close(a_graph, a_eager, atol=ACTION_ATOL[amp], rtol=0)
        torch.cuda.manual_seed(50 + tick)
        e_graph = production.explore(obs, reset)
        if name == "fastsac":  # fresh noise every step, from one random draw: the same numbers both ways
            torch.cuda.manual_seed(50 + tick)
            e_eager = eager.explore(obs, reset)
        else:
            # FlashSAC draws noise and hold lengths in one compiled region, and Inductor may order the two
            # draws either way: compare the arithmetic on the noise the graph actually held instead
            hold = production.noise_hold
            with torch.no_grad():
                mean, log_std = eager.actor.dist(obs["actor"], training=False)
                e_eager = torch.tanh(mean + log_std.exp() * hold.noise)
            if held is not None:  # envs neither reset nor at the end of their hold keep their noise
                keep = ~reset & (hold.count > 1)
                kept += int(keep.sum())
                assert torch.equal(hold.noise[keep], held[0][keep])
                assert bool((hold.count[keep] == held[1][keep] + 1).all())
                assert not bool((hold.noise[reset] == held[0][reset]).any())  # reset envs drew afresh
            held = (hold.noise.clone(), hold.count.clone())
        worst_explore = max(worst_explore, float((e_graph - e_eager).abs().max()))
        torch.testing.assert_close(e_graph, e_eager, atol=EXPLORE_ATOL[amp], rtol=0)
    assert {key[0] for key in production._captured} >= {"act", "explore"} and not production.graph_errors
    assert name == "fastsac" or kept > 0  # some held noise was really carried across replays
    print(f"\n[gpu] {name} {amp}: act max |diff| {worst_act:.2e}, explore max |diff| {worst_explore:.2e}")


def test_policy_restored_from_a_checkpoint_of_a_graph_run_acts_the_same(trained, tmp_path):
    name, amp, live = trained["name"], trained["amp"], trained["production"]
    identity = ck.RunIdentity(name, "synthetic", {"actor": OBS_DIM}, ACTION_DIM, NUM_ENVS)
    counters = {"env_steps": 0, "ticks": 0, "updates": live.total_updates, "policy_version": live.policy_version}
    path = ck.save_checkpoint(tmp_path / "graph_run.pt", ck.build_checkpoint(identity, live.state_dict(), counters))
    data = ck.load_checkpoint(path, map_location="cuda")
    restored = {mode: _build(name, amp, production=mode == "production") for mode in ("production", "eager")}
    for algo in restored.values():
        ck.load_algorithm_state(algo, data, path)
    gen = torch.Generator(device="cuda").manual_seed(11)
    for _ in range(5):  # past the warm-up calls and the capture of both
        obs = {"actor": torch.randn(NUM_ENVS, OBS_DIM, device="cuda", generator=gen)}
        live_action = live.act(obs)
        torch.testing.assert_close(restored["production"].act(obs), live_action, atol=1e-6, rtol=0)
        torch.testing.assert_close(restored["eager"].act(obs), live_action, atol=ACTION_ATOL[amp], rtol=0)
    assert restored["production"].policy_version == live.policy_version
    print(f"\n[gpu] {name} {amp}: restored policy acts as the live graph-captured one")


def test_snapshot_actor_stays_frozen_in_the_compiled_graph_while_training_moves_on(trained):
    """`act_snapshot` (compiled, graph-captured, the actor swapped for its frozen copy) acts like eager `act`
    of the parameters it froze, and keeps doing so while the live actor changes (update phases, then a
    perturbation large enough to show at any precision), until the next snapshot refreshes it in place."""
    name, amp = trained["name"], trained["amp"]
    production, replay = trained["production"], trained["replay"]
    reference = _build(name, amp, production=False)
    gen = torch.Generator(device="cuda").manual_seed(11)
    obs = [{"actor": torch.randn(16, OBS_DIM, device="cuda", generator=gen)} for _ in range(5)]
    for round_ in range(2):  # a snapshot, a changed actor, then a second snapshot refreshed in place
        production.snapshot_actor()
        reference.load_state_dict(copy.deepcopy(production.state_dict()))  # the frozen parameters, eagerly
        frozen = [reference.act(o) for o in obs]
        for i, o in enumerate(obs):  # 2 warm-up calls, the capture, then replays (first round)
            torch.testing.assert_close(production.act_snapshot(o), frozen[i], atol=ACTION_ATOL[amp], rtol=0)
        for phase in range(3):
            torch.cuda.manual_seed(2000 + 10 * round_ + phase)
            production.update_phase(replay, production.updates_per_step)
        with torch.no_grad():  # in place: the live actor's graphs keep their addresses
            for p in production.actor.parameters():
                p.add_(0.3 * torch.randn(p.shape, device="cuda", generator=gen))
        live_moved = max(float((production.act(o) - f).abs().max()) for o, f in zip(obs, frozen, strict=True))
        assert live_moved > 5 * ACTION_ATOL[amp], f"the live actor moved only {live_moved}: the test shows nothing"
        for o, f in zip(obs, frozen, strict=True):  # the snapshot did not follow it
            torch.testing.assert_close(production.act_snapshot(o), f, atol=ACTION_ATOL[amp], rtol=0)
    assert ("act_snapshot", (16, OBS_DIM)) in production._captured and not production.graph_errors


EVAL_ROWS = 4


def test_whole_tick_graph_matches_eager_explore_and_snapshot_act(trained):
    """`runtime.tick_graph`: one captured graph copies the slots in, runs `explore` on the training rows and the
    snapshot's `act` on the evaluation rows, applies the learner's `finish` and copies the actions out. Its
    actions equal eager `explore`/`act` on the same observations and noise (tolerances as above), with the
    learner's actual `finish` arithmetic (scaling) and both parities' graphs captured and replayed."""
    from offpolicy.runtime.learner import TickGraph

    name, amp = trained["name"], trained["amp"]
    production = trained["production"]
    production.load_state_dict(copy.deepcopy(production.state_dict()))  # fresh exploration state, no graphs
    production.snapshot_actor()
    eager = _build(name, amp, production=False)
    eager.load_state_dict(copy.deepcopy(production.state_dict()))
    rows = NUM_ENVS + EVAL_ROWS
    obs_host = torch.empty(rows, OBS_DIM).pin_memory()
    reset_host = torch.empty(rows, dtype=torch.bool).pin_memory()
    action_host = torch.empty(rows, ACTION_DIM).pin_memory()
    kept = torch.zeros(2, rows, ACTION_DIM, device="cuda")
    half, mid = torch.full((ACTION_DIM,), 2.0, device="cuda"), torch.full((ACTION_DIM,), 0.5, device="cuda")

    def finish(action, parity):  # as Learner._finish: keep the normalised actions, return env units
        kept[parity].copy_(action)
        return action * half + mid

    graph = TickGraph(production, {"actor": obs_host}, reset_host, action_host, finish, NUM_ENVS, warmup=2)
    gen = torch.Generator().manual_seed(3)
    worst = 0.0
    for tick in range(8):  # per parity: 2 eager warm-up calls, the capture, then replays
        obs_host.copy_(torch.randn(rows, OBS_DIM, generator=gen))
        reset_host.copy_(torch.rand(rows, generator=gen) < 0.2)
        obs = {"actor": obs_host.cuda()}
        train_obs, eval_obs = {"actor": obs["actor"][:NUM_ENVS]}, {"actor": obs["actor"][NUM_ENVS:]}
        torch.cuda.manual_seed(70 + tick)
        graph(tick % 2)
        got = action_host.cuda()
        if name == "fastsac":  # the same random draw both ways
            torch.cuda.manual_seed(70 + tick)
            train = eager.explore(train_obs, reset_host[:NUM_ENVS].cuda())
        else:  # the noise the graph held (see test_inference_graph_matches_eager_act_and_explore)
            with torch.no_grad():
                mean, log_std = eager.actor.dist(train_obs["actor"], training=False)
                train = torch.tanh(mean + log_std.exp() * production.noise_hold.noise)
        expected = torch.cat([train, eager.act(eval_obs)]) * half + mid
        worst = max(worst, float((got - expected).abs().max()))
        # x2: the scaling; the training rows explore, the evaluation rows act
        torch.testing.assert_close(got[:NUM_ENVS], expected[:NUM_ENVS], atol=2 * EXPLORE_ATOL[amp], rtol=0)
        torch.testing.assert_close(got[NUM_ENVS:], expected[NUM_ENVS:], atol=2 * ACTION_ATOL[amp], rtol=0)
        torch.testing.assert_close(kept[tick % 2] * half + mid, got, atol=1e-6, rtol=0)
    assert graph.error is None and all(call.graph is not None for call in graph.calls)
    print(f"\n[gpu] {name} {amp}: whole-tick graph, max |diff| against eager {worst:.2e}")


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
def test_a_run_with_the_tick_graph_captures_it_and_keeps_strict_time_sharing(tmp_path, algo):
    """The real runtime (hopper, compile + graphs, snapshot evaluations on 4 rows) with the tick graph (the
    default on CUDA): the tick graph is captured, nothing fell back to eager, and the device timeline still
    alternates inference and update phases without overlap."""
    repo = Path(__file__).resolve().parents[2]
    if str(repo) not in sys.path:  # benchmark/ is a top-level folder, importable from the repository root
        sys.path.insert(0, str(repo))
    from hydra import compose, initialize_config_dir

    from benchmark.offpolicy.check_timeline import check_track
    from offpolicy.runtime.runner import Runner
    from offpolicy.runtime.timeline import load_intervals

    overrides = [
        f"algo={algo}", "env=hopper", "env.num_envs=64", "eval.num_envs=4", "eval.episodes=4",
        "eval.interval_s=null", "eval.interval_env_steps=3200", "eval.final=false", "train.total_env_steps=12800",
        "train.learning_starts=640", "logger=none", "checkpoint.interval_env_steps=0", "runtime.trace=true",
        "runtime.tick_graph=true", "algo.batch_size=256", "device=cuda",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    summary = Runner(cfg, tmp_path).run()
    assert summary["tick_graph"] == "captured" and not summary["graph_errors"], summary
    report = check_track(load_intervals(tmp_path / "timeline.json", "device"))
    assert report["passed"] and report["inference_intervals"] >= 150, report
    assert summary["snapshot_evaluations"] >= 1, summary  # the graph's evaluation rows acted for whole episodes


def test_flashsac_reward_statistics_in_a_graph_match_eager():
    """FlashSAC's per-tick `observe` (the reward scaler's running returns and moments) is one captured graph
    with CUDA graphs on: after warm-up, capture and replays it holds the eager copy's statistics, a step with a
    NaN reward left out and finished episodes restarted as in eager. The same kernels run in both, so the
    tolerance is float rounding only."""
    cfg = {"name": "flashsac", **SIZES["flashsac"], "reward_scale_horizon_bound": True}
    eager = make_algorithm(OmegaConf.create({**cfg, "compile": False, "cuda_graphs": False}), _spec(), "cuda")
    production = make_algorithm(OmegaConf.create({**cfg, "compile": False, "cuda_graphs": True}), _spec(), "cuda")
    gen = torch.Generator().manual_seed(3)
    for step in range(12):  # 2 warm-up calls, the capture, then replays
        reward = torch.randn(NUM_ENVS, generator=gen) * 3.0
        if step == 6:
            reward[5] = float("nan")  # the whole step is left out
        done = torch.rand(NUM_ENVS, generator=gen) < 0.2
        terminated, truncated = done & (torch.arange(NUM_ENVS) % 2 == 0), done & (torch.arange(NUM_ENVS) % 2 == 1)
        for algo in (eager, production):
            algo.observe(reward.cuda(), terminated.cuda(), truncated.cuda())
    torch.cuda.synchronize()
    assert not production.graph_errors
    call = production._captured[("observe", (NUM_ENVS,))]
    assert call.graph is not None, "observe was not captured"
    for name, value in eager.reward_scaler.state_dict().items():
        got = production.reward_scaler.state_dict()[name]
        torch.testing.assert_close(got, value, rtol=1e-6, atol=1e-6, msg=name)
    assert float(eager.reward_scaler.count) == 11 * NUM_ENVS  # the NaN step was left out by both


@pytest.mark.parametrize("name", ["fastsac", "flashsac"])
def test_the_averaged_actor_advances_inside_the_captured_update_phase(name):
    """`algo.policy_ema` on the production path: the average after each phase, graph replays included, equals
    the hand-computed lerp toward the actor of that phase (FlashSAC's then projected like its actor)."""
    from offpolicy.algorithms.networks import renormalize_modules

    tau, k = 0.05, 4
    cfg = {"name": name, **SIZES[name], "amp": "none", "compile": True, "cuda_graphs": True}
    algo = make_algorithm(OmegaConf.create({**cfg, "policy_ema": True, "policy_ema_tau": tau}), _spec(), "cuda")
    replay = FixedReplay(random_batch(_spec(), 8 * 256, seed=1).to("cuda"))
    expected = copy.deepcopy(algo.averaged_actor())
    weight = 1.0 - (1.0 - tau) ** k
    for _ in range(PHASES):
        algo.update_phase(replay, k)
        with torch.no_grad():
            for want, live in zip(expected.state_dict().values(), algo.actor.state_dict().values()):
                want.lerp_(live, weight)
            if name == "flashsac":
                renormalize_modules(expected)
    assert any(call.graph is not None for key, call in algo._captured.items() if key[0] == "phase")
    for (key, got), want in zip(algo.averaged_actor().state_dict().items(), expected.state_dict().values()):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=key)
    lag = [(a - b).abs().max() for a, b in zip(expected.parameters(), algo.actor.parameters())]
    assert max(lag) > 1e-4, "the average must lag the actor, or the test shows nothing"


def test_fastsac_learning_rate_decay_advances_inside_the_captured_update_phase():
    """`algo.lr_decay_updates` on the production path: after each phase, graph replays included, the rates the
    optimizers read are the cosine's at the count of updates taken, as eager's (hand-computed here)."""
    import math

    k, decay, ratio = 4, 12, 0.25
    cfg = {**SIZES["fastsac"], "name": "fastsac", "amp": "none", "compile": True, "cuda_graphs": True}
    algo = make_algorithm(OmegaConf.create({**cfg, "lr_decay_updates": decay, "lr_end_ratio": ratio}), _spec(), "cuda")
    replay = FixedReplay(random_batch(_spec(), 8 * 256, seed=1).to("cuda"))
    for phase in range(1, PHASES + 1):
        algo.update_phase(replay, k)
        step = min((phase * k - 1) / decay, 1.0)  # the last update of the phase ran at count phase * k - 1
        want = 3e-4 * (ratio + (1 - ratio) * 0.5 * (1 + math.cos(math.pi * step)))
        assert float(algo.lr_step) == phase * k
        assert float(algo.critic_lr) == pytest.approx(want, rel=1e-5)
        assert float(algo.actor_lr) == pytest.approx(want, rel=1e-5)
    assert any(call.graph is not None for key, call in algo._captured.items() if key[0] == "phase")
    assert float(algo.critic_lr) == pytest.approx(3e-4 * ratio, rel=1e-5)  # held once the decay is over


@pytest.mark.parametrize("algo", ["fastsac", "flashsac"])
@pytest.mark.parametrize("task", ["go1_joystick_flat", "go2_joystick_flat"])
def test_a_locomotion_run_captures_the_tick_graph_with_a_privileged_critic(tmp_path, algo, task):
    """The legged-robot tasks on the CUDA path (compile + graphs + tick graph): the actor reads the task's actor
    observation and the critics its privileged one inside the captured graphs, nothing falls back to eager, and
    the final snapshot reports the tracking statistics."""
    repo = Path(__file__).resolve().parents[2]
    from hydra import compose, initialize_config_dir

    from offpolicy.runtime.runner import Runner

    overrides = [
        f"algo={algo}", f"env={task}", "env.num_envs=64", "eval.num_envs=4", "eval.episodes=4",
        "eval.interval_s=null", "eval.interval_env_steps=null", "train.total_env_steps=12800",
        "train.learning_starts=640", "logger=none", "checkpoint.interval_env_steps=0", "runtime.tick_graph=true",
        "algo.batch_size=256", "device=cuda", "+env.options.max_episode_steps=60",
    ]  # fmt: skip
    with initialize_config_dir(config_dir=str(repo / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    summary = Runner(cfg, tmp_path).run()
    assert summary["completed"] and summary["tick_graph"] == "captured" and not summary["graph_errors"], summary
    final = summary["snapshot_eval"]
    assert final["episodes"] >= 4 and 0.0 <= final["fall_fraction"] <= 1.0, final
    assert all(key in final for key in ("lin_vel_error", "yaw_rate_error", "command_speed")), final
    saved = ck.load_checkpoint(tmp_path / "checkpoints" / "latest.pt")
    actor_dim, critic_dim = {"go1_joystick_flat": (48, 123), "go2_joystick_flat": (49, 52)}[task]
    assert saved["obs_dims"] == {"actor": actor_dim, "critic": critic_dim}, saved["obs_dims"]
