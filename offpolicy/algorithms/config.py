"""Typed schemas of the `algo` config group (one per algorithm, registered in `offpolicy/algorithms/registry.py`);
the options themselves live in `conf/algo/*.yaml`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class AlgoConfig:
    """Fields every off-policy algorithm reads."""

    name: str = "???"
    """which algorithm `make_algorithm` builds: `fastsac` or `flashsac`"""
    updates_per_step: int = 1
    """gradient updates per vector env step (the runner's default `num_updates`)"""
    batch_size: int = 256
    """transitions per gradient update (global batch, not per env)"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """target critic smoothing coefficient: target <- target + tau * (online - target)"""
    compile: bool = True
    """torch.compile the loss functions (forced off on CPU)"""
    cuda_graphs: bool = True
    """capture the update phase and the inference tick as CUDA graphs (forced off on CPU)"""
    compile_mode: str = "default"
    """torch.compile mode; `default` keeps warm-up bounded (no max-autotune)"""
    amp: str = "none"
    """autocast dtype on CUDA: `bf16`, `fp16` (with a loss scaler) or `none`; always off on CPU"""
    graph_warmup_calls: int = 2
    """eager calls per shape before a CUDA graph is captured (they do real work, on a side stream)"""
    policy_ema: bool = False
    """evaluate, checkpoint and export an exponential moving average of the actor's weights (the raw actor still
    explores and trains); docs/decisions.md, "Averaged policy"
    """
    policy_ema_tau: float = 1e-4
    """weight of the actor in the average per gradient update: avg <- avg + tau * (actor - avg)"""


@dataclass
class FastSACConfig(AlgoConfig):
    """FastSAC (Seo et al. 2025, arXiv 2512.01996); defaults from holosoma `FastSACConfig`."""

    name: str = "fastsac"
    updates_per_step: int = 8
    batch_size: int = 8192
    gamma: float = 0.97
    tau: float = 0.125
    amp: str = "bf16"
    policy_frequency: int = 4
    """one actor update every this many critic updates (at update index 1 mod this, as the reference)"""
    actor_lr: float = 3e-4
    """actor AdamW learning rate"""
    critic_lr: float = 3e-4
    """critic AdamW learning rate"""
    alpha_lr: float = 3e-4
    """temperature AdamW learning rate"""
    lr_decay_updates: int = 0
    """gradient updates over which the actor's and critics' rates follow a cosine from actor_lr / critic_lr down
    to lr_end_ratio times them, held after (0: flat rates, as the reference)"""
    lr_end_ratio: float = 0.5
    """where the decay ends, as a fraction of the starting rates (read only when lr_decay_updates > 0)"""
    weight_decay: float = 1e-3
    """AdamW weight decay of actor and critic"""
    alpha_weight_decay: float = 1e-2
    """AdamW weight decay of log-alpha (the reference leaves torch's default, 0.01)"""
    betas: tuple[float, float] = (0.9, 0.95)
    """Adam betas of all three optimizers"""
    max_grad_norm: float = 0.0
    """gradient-norm clip for actor and critic; 0 disables (reference default)"""
    num_atoms: int = 101
    """C51 support size"""
    v_min: float | None = None
    """lowest C51 atom; null: min(0, r_low) / (1 - gamma) from the task's per-step reward range"""
    v_max: float | None = None
    """highest C51 atom; null: max(0, r_high) / (1 - gamma) from the task's per-step reward range"""
    num_critics: int = 2
    """critics in the ensemble; each learns from its own target, the actor maximises their mean"""
    critic_hidden_dim: int = 768
    """critic widths are dim, dim/2, dim/4"""
    actor_hidden_dim: int = 512
    """actor widths are dim, dim/2, dim/4"""
    use_layer_norm: bool = True
    """LayerNorm after every hidden linear layer"""
    log_std_min: float = -5.0
    """lower end of the tanh-squashed log-std range"""
    log_std_max: float = 0.0
    """upper end of the tanh-squashed log-std range"""
    alpha_init: float = 1e-3
    """initial entropy temperature"""
    target_entropy_ratio: float = 0.0
    """target entropy is -ratio * action_dim"""
    autotune_alpha: bool = True
    """learn the temperature"""
    obs_normalization: bool = True
    """empirical observation normalisation, updated from replay batches only"""
    obs_norm_eps: float = 1e-2
    """added to the std when normalising observations"""


@dataclass
class FlashSACConfig(AlgoConfig):
    """FlashSAC (Kim, Lee et al. 2026, arXiv 2604.04539); defaults from the official GPU-simulator recipe."""

    name: str = "flashsac"
    updates_per_step: int = 2
    batch_size: int = 2048
    gamma: float = 0.99
    tau: float = 0.01
    amp: str = "fp16"
    actor_update_period: int = 2
    """actor and temperature update on every this-many-th critic update"""
    lr_init: float = 3e-4
    """learning rate at update 0 (warm-up start)"""
    lr_peak: float = 3e-4
    """learning rate at the end of warm-up"""
    lr_end: float = 1.5e-4
    """learning rate after the cosine decay"""
    lr_warmup_updates: int = 0
    """optimizer steps of linear warm-up"""
    lr_decay_updates: int = 100_000
    """optimizer steps at which the cosine decay reaches lr_end (set it to the run's update budget)"""
    actor_num_blocks: int = 2
    """inverted-residual blocks in the actor"""
    actor_hidden_dim: int = 128
    """actor width"""
    critic_num_blocks: int = 2
    """inverted-residual blocks in each critic"""
    critic_hidden_dim: int = 256
    """critic width"""
    expansion: int = 4
    """inverted-residual expansion factor"""
    num_critics: int = 2
    """critics in the ensemble; the target uses the distribution of the one with the lower mean"""
    num_bins: int = 101
    """categorical critic support size"""
    normalized_g_max: float = 5.0
    """G_max: the critic support is [-G_max, G_max] and rewards are scaled into it"""
    reward_scaling: bool = True
    """adaptive reward scaling by the running return statistics"""
    reward_scale_horizon_bound: bool = False
    """also bound the scale by max|r| / ((1 - gamma) G_max), so values fit the support from the start (not the
    reference; offpolicy/algorithms/normalizers.py RewardScaler)"""
    log_std_min: float = -10.0
    """lower end of the tanh-squashed log-std range"""
    log_std_max: float = 2.0
    """upper end of the tanh-squashed log-std range"""
    temp_init: float = 0.01
    """initial entropy temperature"""
    temp_max: float | None = None
    """upper bound of the temperature (null: unbounded, as the reference); see conf/algo_env/flashsac_humanoid.yaml"""
    target_sigma: float = 0.15
    """unified target entropy is 1/2 |A| log(2 pi e sigma^2)"""
    noise_zeta_mu: float = 2.0
    """exponent of the truncated Zeta distribution of noise-hold lengths"""
    noise_zeta_max: int = 16
    """longest noise hold in env steps"""
    bn_momentum: float = 0.01
    """BatchNorm running-statistics momentum"""
