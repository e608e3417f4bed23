"""Entry point: `python -m offpolicy.train algo=fastsac env=ant`.

Thin by design: Hydra composes the config, this module hands it and the Hydra
output dir to `offpolicy.runner.Runner`, and turns how the run ended into an
exit status with a message on stderr:

    0    finished
    1    Hydra could not compose the config (its own message)
    2    invalid affinity: one line naming the bad CPU ids
    3    the collector failed: raised (its traceback is printed), died (e.g. SIGKILL),
         hung past runtime.collector_timeout_s (its stack is dumped), or could not start
    4    the learner raised (its traceback is printed)
    130  interrupted by SIGINT: the collector was stopped and shared memory released
    143  terminated by SIGTERM: same clean stop

torch and the runner are imported inside `main`, so the module itself stays
light (the collector is spawned with `__main__` hidden and never imports it).
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Compose, run, report."""
    from hydra.core.hydra_config import HydraConfig

    from offpolicy.affinity import AffinityError
    from offpolicy.lifecycle import RunFailure
    from offpolicy.runner import Runner

    run_dir = HydraConfig.get().runtime.output_dir
    try:
        runner = Runner(cfg, run_dir)
    except AffinityError as exc:
        print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    try:
        runner.run()
    except RunFailure as failure:
        report = failure.report()
        logging.getLogger("offpolicy.train").error(failure.headline())
        print(report, file=sys.stderr, flush=True)
        sys.exit(failure.exit_code)


if __name__ == "__main__":
    main()
