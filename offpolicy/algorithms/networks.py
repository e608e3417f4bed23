"""Networks of both algorithms. Critic ensembles are batched: one kernel per layer for all members.

Tensors inside an ensemble have layout (E, B, features).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from offpolicy.algorithms.normalizers import EmpiricalNormalizer
from offpolicy.algorithms.sac import squash_log_std

# --------------------------------------------------------------------------- FastSAC


class EnsembleLinear(nn.Module):
    """E independent affine layers applied with one batched matmul; nn.Linear's default init per member."""

    def __init__(self, num_members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(in_dim)
        self.weight = nn.Parameter(torch.empty(num_members, in_dim, out_dim).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(num_members, 1, out_dim).uniform_(-bound, bound))

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over features with a separate affine per ensemble member."""

    def __init__(self, num_members: int, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_members, 1, dim))
        self.bias = nn.Parameter(torch.zeros(num_members, 1, dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, x.shape[-1:], eps=self.eps) * self.weight + self.bias


def _halving_widths(hidden_dim: int) -> list[int]:
    return [hidden_dim, hidden_dim // 2, hidden_dim // 4]


class FastSACCritic(nn.Module):
    """Ensemble of C51 critics: Linear-LayerNorm-SiLU on widths (d, d/2, d/4), then `num_atoms` logits."""

    def __init__(
        self, obs_dim: int, action_dim: int, hidden_dim: int, num_atoms: int, num_critics: int, use_layer_norm: bool
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        layers: list[nn.Module] = []
        in_dim = obs_dim + action_dim
        for width in _halving_widths(hidden_dim):
            layers += [EnsembleLinear(num_critics, in_dim, width)]
            layers += [EnsembleLayerNorm(num_critics, width) if use_layer_norm else nn.Identity(), nn.SiLU()]
            in_dim = width
        layers.append(EnsembleLinear(num_critics, in_dim, num_atoms))
        self.net = nn.Sequential(*layers)

    def forward(self, obs: Tensor, action: Tensor) -> Tensor:
        """Logits (E, B, num_atoms)."""
        x = torch.cat([obs, action.to(obs.dtype)], dim=-1)
        return self.net(x.unsqueeze(0).expand(self.num_critics, -1, -1))


class FastSACActor(nn.Module):
    """Tanh-Gaussian actor: Linear-LayerNorm-SiLU on widths (d, d/2, d/4); zero-initialised mean and log-std heads.

    Owns the observation normaliser so that `forward(raw_obs)` is the whole deployed policy.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dim: int,
        use_layer_norm: bool,
        log_std_min: float,
        log_std_max: float,
        obs_normalization: bool,
        obs_norm_eps: float,
    ) -> None:
        super().__init__()
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.normalizer = EmpiricalNormalizer(obs_dim, obs_norm_eps) if obs_normalization else None
        layers: list[nn.Module] = []
        in_dim = obs_dim
        for width in _halving_widths(hidden_dim):
            layers += [nn.Linear(in_dim, width), nn.LayerNorm(width) if use_layer_norm else nn.Identity(), nn.SiLU()]
            in_dim = width
        self.trunk = nn.Sequential(*layers)
        self.mean_head = nn.Linear(in_dim, action_dim)
        self.log_std_head = nn.Linear(in_dim, action_dim)
        for head in (self.mean_head, self.log_std_head):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def normalize(self, obs: Tensor) -> Tensor:
        """Raw observations to network inputs (current statistics, no update)."""
        return obs if self.normalizer is None else self.normalizer(obs)

    def dist(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and log-std of the pre-tanh Gaussian for normalised inputs `x`."""
        h = self.trunk(x)
        return self.mean_head(h), squash_log_std(self.log_std_head(h), self.log_std_min, self.log_std_max)

    def forward(self, obs: Tensor) -> Tensor:
        """Deterministic action tanh(mean) for raw observations."""
        return torch.tanh(self.dist(self.normalize(obs))[0])


# --------------------------------------------------------------------------- FlashSAC


def _assign(param: Tensor, value: Tensor, allowed: Tensor | None) -> None:
    """param <- value, or only where `allowed` (0/1 tensor) is 1: a select, so nothing moves when it is 0."""
    param.copy_(value if allowed is None else torch.where(allowed > 0, value, param))


class UnitLinear(nn.Module):
    """Bias-free linear layer(s) (E, out, in) whose rows are kept at unit L2 norm; orthogonal init."""

    def __init__(self, num_members: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        weight = torch.empty(num_members, out_dim, in_dim)
        for member in weight:
            nn.init.orthogonal_(member)
        self.weight = nn.Parameter(weight)
        self.renormalize_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.bmm(x, self.weight.transpose(1, 2))

    @torch.no_grad()
    def renormalize_(self, allowed: Tensor | None = None) -> None:
        """Project every row back onto the unit sphere (where `allowed`, a 0/1 tensor, is 1)."""
        _assign(self.weight, F.normalize(self.weight, dim=-1, eps=1e-8), allowed)


class UnitBatchNorm(nn.Module):
    """BatchNorm over the batch dim of (E, B, D) with per-member affine; (gamma, beta) kept at norm sqrt(D).

    `training` is an argument, not module state: FlashSAC evaluates the same network with
    batch statistics and with running statistics within one update.
    """

    def __init__(self, num_members: int, dim: int, momentum: float, eps: float = 1e-5) -> None:
        super().__init__()
        self.momentum, self.eps = momentum, eps
        self.weight = nn.Parameter(torch.ones(num_members, dim))
        self.bias = nn.Parameter(torch.zeros(num_members, dim))
        self.register_buffer("running_mean", torch.zeros(num_members, dim))
        self.register_buffer("running_var", torch.ones(num_members, dim))

    def forward(self, x: Tensor, training: bool, update_stats: bool = True) -> Tensor:
        x = x.float()
        if training:
            var, mean = torch.var_mean(x, dim=1, correction=0, keepdim=True)
            if update_stats:
                with torch.no_grad():
                    n = x.shape[1]
                    self.running_mean.lerp_(mean.squeeze(1), self.momentum)
                    self.running_var.lerp_(var.squeeze(1) * (n / max(n - 1, 1)), self.momentum)
        else:
            mean, var = self.running_mean.unsqueeze(1), self.running_var.unsqueeze(1)
        return (x - mean) * torch.rsqrt(var + self.eps) * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)

    @torch.no_grad()
    def renormalize_(self, allowed: Tensor | None = None) -> None:
        """Rescale (gamma, beta) jointly to L2 norm sqrt(D) per member (where `allowed` is 1)."""
        dim = self.weight.shape[-1]
        norm = torch.sqrt((self.weight.pow(2) + self.bias.pow(2)).sum(-1, keepdim=True) + 1e-8)
        factor = math.sqrt(dim) / norm
        _assign(self.weight, self.weight * factor, allowed)
        _assign(self.bias, self.bias * factor, allowed)


class UnitRMSNorm(nn.Module):
    """RMSNorm over features of (E, B, D) with a per-member scale kept at norm sqrt(D)."""

    def __init__(self, num_members: int, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(num_members, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.unsqueeze(1)

    @torch.no_grad()
    def renormalize_(self, allowed: Tensor | None = None) -> None:
        """Rescale the scale vector to L2 norm sqrt(D) (where `allowed` is 1)."""
        dim = self.weight.shape[-1]
        factor = math.sqrt(dim) / torch.sqrt(self.weight.pow(2).sum(-1, keepdim=True) + 1e-8)
        _assign(self.weight, self.weight * factor, allowed)


class InvertedResidualBlock(nn.Module):
    """x + ReLU(BN(W2 ReLU(BN(W1 x)))) with W1 expanding the width by `expansion`."""

    def __init__(self, num_members: int, dim: int, expansion: int, momentum: float) -> None:
        super().__init__()
        self.up = UnitLinear(num_members, dim, dim * expansion)
        self.up_norm = UnitBatchNorm(num_members, dim * expansion, momentum)
        self.down = UnitLinear(num_members, dim * expansion, dim)
        self.down_norm = UnitBatchNorm(num_members, dim, momentum)

    def forward(self, x: Tensor, training: bool, update_stats: bool = True) -> Tensor:
        h = F.relu(self.up_norm(self.up(x), training, update_stats))
        h = F.relu(self.down_norm(self.down(h), training, update_stats))
        return x.float() + h


class FlashSACTrunk(nn.Module):
    """BatchNorm on the raw input, unit-norm embedding, inverted-residual blocks, RMSNorm."""

    def __init__(
        self, num_members: int, in_dim: int, hidden_dim: int, num_blocks: int, expansion: int, momentum: float
    ) -> None:
        super().__init__()
        self.input_norm = UnitBatchNorm(num_members, in_dim, momentum)
        self.embed = UnitLinear(num_members, in_dim, hidden_dim)
        self.blocks = nn.ModuleList(
            InvertedResidualBlock(num_members, hidden_dim, expansion, momentum) for _ in range(num_blocks)
        )
        self.out_norm = UnitRMSNorm(num_members, hidden_dim)

    def forward(self, x: Tensor, training: bool, update_stats: bool = True) -> Tensor:
        h = self.embed(self.input_norm(x, training, update_stats))
        for block in self.blocks:
            h = block(h, training, update_stats)
        return self.out_norm(h)


def renormalize_modules(module: nn.Module, allowed: Tensor | None = None) -> None:
    """Apply every `renormalize_` in `module` (after each optimizer step; only where `allowed` is 1)."""
    for m in module.modules():
        if m is not module and hasattr(m, "renormalize_"):
            m.renormalize_(allowed)


def running_stats(module: nn.Module) -> list[Tensor]:
    """The BatchNorm running statistics of `module` (buffers updated by forward passes in training mode)."""
    return [t for m in module.modules() if isinstance(m, UnitBatchNorm) for t in (m.running_mean, m.running_var)]


@torch.no_grad()
def keep_stats_if_(stats: list[Tensor], saved: list[Tensor], allowed: Tensor) -> None:
    """Put `saved` back into `stats` unless `allowed` is 1 (a skipped update's forward passes leave no trace)."""
    for current, before in zip(stats, saved):
        current.copy_(torch.where(allowed > 0, current, before))


class FlashSACActor(nn.Module):
    """Tanh-Gaussian actor on a FlashSAC trunk; log-std squashed into [log_std_min, log_std_max]."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dim: int,
        num_blocks: int,
        expansion: int,
        momentum: float,
        log_std_min: float,
        log_std_max: float,
    ) -> None:
        super().__init__()
        self.log_std_min, self.log_std_max = log_std_min, log_std_max
        self.trunk = FlashSACTrunk(1, obs_dim, hidden_dim, num_blocks, expansion, momentum)
        self.mean_head = UnitLinear(1, hidden_dim, action_dim)
        self.mean_bias = nn.Parameter(torch.zeros(action_dim))
        self.log_std_head = UnitLinear(1, hidden_dim, action_dim)
        self.log_std_bias = nn.Parameter(torch.zeros(action_dim))

    def dist(self, obs: Tensor, training: bool) -> tuple[Tensor, Tensor]:
        """Mean and log-std (B, A) of the pre-tanh Gaussian for raw observations."""
        h = self.trunk(obs.unsqueeze(0), training)
        mean = (self.mean_head(h) + self.mean_bias).squeeze(0)
        raw = (self.log_std_head(h) + self.log_std_bias).squeeze(0)
        return mean.float(), squash_log_std(raw.float(), self.log_std_min, self.log_std_max)

    def forward(self, obs: Tensor) -> Tensor:
        """Deterministic action tanh(mean) (BatchNorm on running statistics)."""
        return torch.tanh(self.dist(obs, training=False)[0])


class FlashSACCritic(nn.Module):
    """Ensemble of categorical critics on FlashSAC trunks over (obs, action); logits (E, B, num_bins)."""

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden_dim: int,
        num_blocks: int,
        expansion: int,
        momentum: float,
        num_bins: int,
        num_critics: int,
    ) -> None:
        super().__init__()
        self.num_critics = num_critics
        self.trunk = FlashSACTrunk(num_critics, obs_dim + action_dim, hidden_dim, num_blocks, expansion, momentum)
        self.head = UnitLinear(num_critics, hidden_dim, num_bins)
        self.head_bias = nn.Parameter(torch.zeros(num_critics, 1, num_bins))

    def forward(self, obs: Tensor, action: Tensor, training: bool, update_stats: bool = True) -> Tensor:
        x = torch.cat([obs.float(), action.float()], dim=-1)
        h = self.trunk(x.unsqueeze(0).expand(self.num_critics, -1, -1), training, update_stats)
        return self.head(h) + self.head_bias
