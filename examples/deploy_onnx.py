"""Drive the CPU simulation with an exported policy, as a robot-side loop would: numpy and onnxruntime, no torch.

    python -m offpolicy.export checkpoint=<run dir>/checkpoints/latest.pt out=policy.onnx
    python examples/deploy_onnx.py policy.onnx [steps]

On a robot, `obs` comes from its sensors in the JSON's `observation_layout` order, and the `joint_targets`
output (where the task has one) goes to the joint PD controllers with the JSON's `kp` and `kd`, every
`control_dt` seconds; here the simulated env takes the `action` output and does that mapping itself.
"""

import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort

import envs


def main(onnx_path: str, steps: int = 1000) -> float:
    """Run one env for `steps` control steps on the exported policy; returns the summed reward."""
    info = json.loads(Path(onnx_path).with_suffix(".json").read_text())
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    env = envs.make(info["env"], num_envs=1, seed=0)  # on a robot: its sensors, in info's observation layout
    obs, total = env.reset().obs["actor"], 0.0
    for _ in range(steps):
        (action,) = session.run(["action"], {"obs": obs.astype(np.float32)})
        state = env.step(action)  # on a robot: joint_targets to the PD controllers every control_dt
        obs, total = state.obs["actor"], total + float(state.reward[0])
    env.close()
    print(f"{info['env']}: {steps} steps of {info['control_dt']} s, summed reward {total:.3f}")
    return total


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
