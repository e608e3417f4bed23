"""Every `algo x env` composition through Hydra's specialization pattern validates and builds."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from envs.dmc import TASKS as DMC_TASKS
from envs.gymnasium import TASKS
from offpolicy.algorithms import make_algorithm, validate

CONF = Path(__file__).resolve().parents[2] / "conf"
ALGOS = ["fastsac", "flashsac"]
ENVS = ["ant", "halfcheetah", "hopper", "humanoid", "walker2d"]
DIMS = {"ant": (105, 8), "halfcheetah": (17, 6), "hopper": (11, 3), "humanoid": (348, 17), "walker2d": (17, 6)}
DMC_ENVS = list(DMC_TASKS)


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory):
    """A primary config using the repo's algo groups and stub env options (the env group is not ours)."""
    root = tmp_path_factory.mktemp("conf")
    (root / "env").mkdir()
    for env in ENVS + DMC_ENVS:
        (root / "env" / f"{env}.yaml").write_text(f"name: {env}\nnum_envs: 4\n")
    (root / "config.yaml").write_text(
        "defaults:\n  - algo: fastsac\n  - env: hopper\n  - optional algo_env: ${algo}_${env}\n  - _self_\n"
        f"hydra:\n  searchpath:\n    - file://{CONF}\n"
    )
    return root


def test_every_task_has_a_specialization_file():
    for algo in ALGOS:
        for env in ENVS + DMC_ENVS:
            text = (CONF / "algo_env" / f"{algo}_{env}.yaml").read_text()
            assert text.startswith("# @package _global_")


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", ENVS)
def test_compose_validate_and_build(config_dir, spec_factory, algo, env):
    with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"algo={algo}", f"env={env}"])
    assert cfg.algo.name == algo
    validated = validate(cfg.algo)
    specialization = OmegaConf.load(CONF / "algo_env" / f"{algo}_{env}.yaml")
    for key, value in (specialization.get("algo") or {}).items():
        assert validated[key] == value  # the per-task file won over conf/algo/<algo>.yaml
    obs_dim, action_dim = DIMS[env]
    spec = spec_factory(
        num_envs=4, obs_dims={"actor": obs_dim}, action_dim=action_dim, reward_range=TASKS[env]().reward_range
    )
    built = make_algorithm(cfg.algo, spec, "cpu")
    assert built.batch_size == cfg.algo.batch_size and built.updates_per_step == cfg.algo.updates_per_step
    assert not (built.use_compile or built.use_cuda_graphs or built.amp_dtype)  # all off on CPU


@pytest.mark.parametrize("algo", ALGOS)
def test_compose_and_validate_dmc(config_dir, spec_factory, algo):
    # every DMC task composes and validates; the widest (the dog: 223 obs, 38 actions) also builds
    for env in DMC_ENVS:
        with initialize_config_dir(config_dir=str(config_dir), version_base="1.3"):
            cfg = compose(config_name="config", overrides=[f"algo={algo}", f"env={env}"])
        validated = validate(cfg.algo)
        specialization = OmegaConf.load(CONF / "algo_env" / f"{algo}_{env}.yaml")
        for key, value in specialization.algo.items():
            assert validated[key] == value
        # the C51 support of FastSAC follows the env's reward range, never a hand-set one for these tasks
        assert "v_min" not in specialization.algo and "v_max" not in specialization.algo
    spec = spec_factory(num_envs=4, obs_dims={"actor": 223}, action_dim=38, reward_range=(0.0, 1.0))  # DMC's
    built = make_algorithm(cfg.algo, spec, "cpu")
    assert built.updates_per_step == cfg.algo.updates_per_step
    if algo == "fastsac":  # rewards in [0, 1]: returns in [0, 1 / (1 - gamma)]
        assert (built.v_min, built.v_max) == pytest.approx((0.0, 1.0 / (1.0 - cfg.algo.gamma)))


def test_algo_yaml_matches_schema_defaults():
    # the YAML spells out the reference recipe; the dataclass defaults must agree with it
    for algo in ALGOS:
        yaml_cfg = OmegaConf.load(CONF / "algo" / f"{algo}.yaml")
        assert validate(yaml_cfg) == validate(OmegaConf.create({"name": algo}))


def test_unknown_keys_are_rejected():
    with pytest.raises(ConfigKeyError):
        validate(OmegaConf.create({"name": "fastsac", "batchsize": 1}))
    with pytest.raises(ValueError):
        validate(OmegaConf.create({"name": "ppo"}))
