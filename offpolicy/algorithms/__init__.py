"""Off-policy algorithms: the contract (`contract.py`), the maths (`sac.py`, `distributional.py`), the speed
layer (`optim.py`, `capture.py`), the algorithms (`fastsac.py`, `flashsac.py`) and their registry (`registry.py`)."""

from offpolicy.algorithms.config import AlgoConfig, FastSACConfig, FlashSACConfig
from offpolicy.algorithms.contract import OffPolicyAlgorithm
from offpolicy.algorithms.registry import ALGORITHMS, make_algorithm, register_algorithm, validate

__all__ = [
    "ALGORITHMS",
    "AlgoConfig",
    "FastSACConfig",
    "FlashSACConfig",
    "OffPolicyAlgorithm",
    "make_algorithm",
    "register_algorithm",
    "validate",
]
