"""A job's servers: unused at its start, ended at its end.

Parameter servers are part of one job and end with it (``ps/server/process.py``): a server that
went on to the next job would start it holding the last one's rows and clocks. So a new run
refuses servers another run has used (it would train on that run's rows), and once the job's
final checkpoint is committed, worker 0 tells every server that the job finished, and they exit.
Nothing is sent when a worker fails or is interrupted: the servers stay up for the job's
resume. Embedded shard stores end with their process and are never told.
"""

import logging

log = logging.getLogger(__name__)


def check_unused(trainer) -> None:
    """Before a new run's first step: worker 0 checks that no run has used the servers, and no
    worker pulls before it has; a refusal is every worker's error."""
    if not trainer.recipe.ps.servers:
        return
    trainer.workers.from_leader(trainer.client.check_unused)


def end(trainer) -> None:
    """The job is over (every worker's ``fit`` returned, a barrier): worker 0 tells each server it
    finished with the run's final checkpoint. A server that did not take it is named (it stays up
    and must be stopped by hand); the job's outcome is its checkpoint, so that is no error."""
    if not trainer.recipe.ps.servers:
        return
    trainer.workers.barrier()
    if not trainer.workers.leader:
        return
    for line in trainer.client.finish(trainer.checkpoints.saved):
        log.warning("a server did not end with the job (stop it by hand): %s", line)
