"""Entry point: `python -m offpolicy.train algo=fastsac env=ant`.

Thin by design: Hydra composes the config, this module validates it once
(`offpolicy.config.validate_train_config`) and hands the typed run config and the Hydra
output dir to `offpolicy.runtime.runner.Runner`, and turns how the run ended into an
exit status (`offpolicy.exit_status.ExitStatus`) with a message on stderr:

    0    finished
    1    an unexpected error none of the statuses below covers (Hydra prints its traceback)
    2    invalid config: one line naming the key, its value and what is allowed
         (offpolicy.config, task options included), Hydra's own composition error (an
         unknown key, group choice or override syntax, with the valid choices), bad CPU
         ids (offpolicy.affinity), or for a local parallel sweep a CPU plan that does not
         fit (said once, before any job starts)
    3    the collector failed: raised (its traceback is printed), died (e.g. SIGKILL),
         hung past runtime.collector_timeout_s (its stack is dumped), or could not start
    4    the learner raised (its traceback is printed)
    5    train.resume names a checkpoint that is missing, unreadable, unsafe or made for
         another run (other algo/env/dims): one line says which; nothing was trained
    130  interrupted by SIGINT: the collector was stopped and shared memory released
    143  terminated by SIGTERM: same clean stop

torch and the runner are imported inside `main`, so the module itself stays
light (the collector is spawned with `__main__` hidden and never imports it).
"""

from __future__ import annotations

import dataclasses
import logging
import sys

import hydra
from omegaconf import DictConfig

from offpolicy.exit_status import ExitStatus


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    """Compose, run, report."""
    from hydra.core.hydra_config import HydraConfig

    from offpolicy.config import ConfigError, validate_train_config

    try:  # before anything starts: no collector, no CPU lease, no W&B run for a config that cannot run
        run = validate_train_config(cfg)
    except ConfigError as exc:
        print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
        sys.exit(ExitStatus.INVALID_CONFIG)

    from offpolicy.affinity import AffinityError, confine_job
    from offpolicy.checkpoint import CheckpointError
    from offpolicy.logger import RunContext
    from offpolicy.runtime.collector_process import Interrupted, RunFailure
    from offpolicy.runtime.runner import Runner

    hydra_cfg = HydraConfig.get()
    context = RunContext.from_hydra(hydra_cfg)
    job_cpus = None
    try:
        try:
            if context.sweep_dir is not None:  # jobs of a local parallel sweep get disjoint CPU blocks
                job_cpus = confine_job(
                    context.launcher,
                    hydra_cfg.launcher,
                    context.sweep_dir,
                    context.job_num or 0,
                    dataclasses.asdict(run.affinity),
                    logging.getLogger("offpolicy.train"),
                )
                if job_cpus is not None:
                    context = dataclasses.replace(context, cpu_block=job_cpus.cpus)
            runner = Runner(run, context.output_dir, context=context)  # the validated config: checked once
        except (AffinityError, ConfigError) as exc:
            print(f"[offpolicy] invalid config: {exc}", file=sys.stderr, flush=True)
            sys.exit(ExitStatus.INVALID_CONFIG)
        except CheckpointError as exc:
            print(f"[offpolicy] {exc}", file=sys.stderr, flush=True)
            sys.exit(ExitStatus.BAD_CHECKPOINT)
        try:
            runner.run()
        except CheckpointError as exc:
            print(f"[offpolicy] {exc}", file=sys.stderr, flush=True)
            sys.exit(ExitStatus.BAD_CHECKPOINT)
        except RunFailure as failure:
            if not isinstance(failure, Interrupted):  # a stop on request is no error: its one line says it all
                logging.getLogger("offpolicy.train").error(failure.headline())
            print(failure.report(), file=sys.stderr, flush=True)
            sys.exit(failure.exit_code)
    finally:
        if job_cpus is not None:
            job_cpus.release()


if __name__ == "__main__":
    from offpolicy.config import hydra_errors_in_one_line

    with hydra_errors_in_one_line():  # Hydra's own config errors: one line, exit status 2
        main()
