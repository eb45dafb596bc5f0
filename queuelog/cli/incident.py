"""`queuelog schedules run` and `queuelog jobs cancel|run-now`: for operators in an incident."""

from __future__ import annotations

import argparse
import logging
from typing import TYPE_CHECKING

from queuelog.cli.as_operator import cli_principal, operator_settings, utc_text, with_queue
from queuelog.cli.errors import CommandError
from queuelog.settings import (
    env_name,
)

if TYPE_CHECKING:
    pass
cli_log = logging.getLogger("queuelog.cli")


def cmd_schedules(args: argparse.Namespace) -> None:
    from queuelog.errors import BadInput

    settings = operator_settings(args)
    try:
        job = with_queue(settings, lambda queue: queue.run_schedule_now(cli_principal(), args.name))
    except BadInput as refusal:
        if settings.job_types:
            raise
        raise CommandError(
            f"{refusal.message}; here the allowlist is the types added at runtime alone:"
            f" pass --job-types a,b (or set {env_name('job_types')}) as the server has them"
        ) from None
    print(
        f"enqueued job {job.id} ({job.type}) of schedule {args.name!r} now, idempotency key"
        f" {job.idempotency_key}; its ticks go on as before"
    )


def cmd_jobs(args: argparse.Namespace) -> None:
    from queuelog.model import JobStatus
    from queuelog.resolvers.ids import parse_job_id

    job_id = parse_job_id(args.id.strip(), "ID")
    settings = operator_settings(args)
    actor = cli_principal()
    # The API's cancelJob and runJobNow log nothing (producers steer their own jobs all day);
    # an operator's action outside the API is logged, naming them.
    if args.jobs_command == "run-now":
        job = with_queue(settings, lambda queue: queue.run_job_now(actor, job_id))
        cli_log.info("job %d (%s) run now by %s", job.id, job.type, actor.name)
        print(f"job {job.id} ({job.type}) is due now, {utc_text(job.run_at)}")
        return
    job = with_queue(settings, lambda queue: queue.cancel(actor, job_id))
    cli_log.info("job %d (%s) cancel by %s: %s", job.id, job.type, actor.name, job.status.name)
    if job.status is JobStatus.CANCELLED:
        print(f"cancelled job {job.id} ({job.type})")
    elif job.cancel_requested:
        print(
            f"cancel requested for job {job.id} ({job.type}), {job.status.name}: its worker is told,"
            " and it ends CANCELLED when the worker stops, its lease expires or the grace passes"
        )
    else:  # pragma: no cover - cancel answers a job cancelled or asked to be
        print(f"job {job.id} ({job.type}) is {job.status.name}")
