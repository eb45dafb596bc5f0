"""`queuelog types`: list, pause, resume, add and remove job types (API.md sections 11, 12)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from queuelog.cli.as_operator import (
    NO_JOB_TYPES,
    cli_principal,
    operator_settings,
    parse_until,
    utc_text,
    with_queue,
)
from queuelog.cli.errors import PROG, CommandError
from queuelog.settings import (
    Settings,
)

if TYPE_CHECKING:
    from queuelog.auth import Principal
    from queuelog.model import TypeControl
    from queuelog.queue import JobQueue
cli_log = logging.getLogger("queuelog.cli")


def describe_state(control: TypeControl, now: datetime) -> str:
    if not control.paused_at(now):
        return "active"
    if control.paused_until is None:
        return "PAUSED"
    return f"PAUSED until {utc_text(control.paused_until)}"


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def describe_rate(control: TypeControl) -> str:
    rate = control.rate_limit
    if rate is None:
        return "-"
    return f"{rate.limit}/{rate.period_seconds}s" + (" per key" if rate.per_key else "")


def types_table(controls: Sequence[TypeControl], now: datetime) -> list[str]:
    """`types list`: a header and one line per type, in columns."""
    rows = [("TYPE", "STATE", "RUNNING", "MAX RUNNING", "PER KEY", "RATE LIMIT", "TIMEOUT")]
    for c in controls:
        timeout = "-" if c.timeout_seconds is None else f"{c.timeout_seconds}s"
        rows.append(
            (
                c.type,
                describe_state(c, now),
                str(c.running),
                _limit(c.max_running),
                _limit(c.max_running_per_key),
                describe_rate(c),
                timeout,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def cmd_types(args: argparse.Namespace) -> None:
    settings = operator_settings(args)
    now = datetime.now(UTC)
    if args.types_command == "list":
        controls = with_queue(settings, lambda queue: queue.type_controls())
        if not controls:
            raise CommandError(NO_JOB_TYPES)
        for line in types_table(controls, now):
            print(line)
        return
    job_type = args.type
    actor = cli_principal()
    if args.types_command in ("add", "remove"):
        change_types(settings, args.types_command, job_type)
        return
    if args.types_command == "pause":
        until = parse_until(args.until, now) if args.until is not None else None

        async def pause(queue: JobQueue) -> tuple[bool, TypeControl]:
            was_paused = _paused(await _type_controls(queue), job_type, now)
            return was_paused, await queue.pause_type(actor, job_type, until)

        was_paused, control = with_queue(settings, pause)
        if control.paused_until is not None:
            how = f"until {utc_text(control.paused_until)} (or `{PROG} types resume {job_type}`)"
        else:
            how = f"until `{PROG} types resume {job_type}`"
        again = " (it was already paused)" if was_paused else ""
        print(
            f"paused job type {job_type!r}{again}: no server claims its jobs {how}; "
            f"enqueues are still accepted, and its {control.running} RUNNING job(s) go on"
        )
        return

    async def resume(queue: JobQueue) -> tuple[bool, TypeControl]:
        was_paused = _paused(await _type_controls(queue), job_type, now)
        return was_paused, await queue.resume_type(actor, job_type)

    was_paused, control = with_queue(settings, resume)
    if was_paused:
        print(f"resumed job type {job_type!r}: servers claim its jobs again ({control.running} RUNNING now)")
    else:
        print(f"job type {job_type!r} was not paused; nothing changed ({control.running} RUNNING now)")


def _paused(controls: Sequence[TypeControl], job_type: str, now: datetime) -> bool:
    return any(c.type == job_type and c.paused_at(now) for c in controls)


async def _type_controls(queue: JobQueue) -> list[TypeControl]:
    """Every allowed type's controls; none allowed at all is the operator's mistake."""
    controls = await queue.type_controls()
    if not controls:
        raise CommandError(NO_JOB_TYPES)
    return controls


def change_types(settings: Settings, action: str, job_type: str) -> None:
    """`types add` and `types remove`, as addJobType and removeJobType."""
    actor = cli_principal()
    if action == "add":
        was = with_queue(settings, lambda queue: _add_type(queue, actor, job_type))
        if was == "added":
            print(f"job type {job_type!r} was added already; nothing changed")
        else:
            also = " (it is in --job-types here too)" if was == "configured" else ""
            print(f"added job type {job_type!r}{also}: every server on the database accepts it at once")
        return
    if with_queue(settings, lambda queue: queue.remove_job_type(actor, job_type)):
        print(
            f"removed job type {job_type!r}: servers refuse new enqueues of it, but for those whose own"
            " job types name it; its jobs stay, and can still be claimed, listed and retried"
        )
    else:
        print(f"job type {job_type!r} was not added at runtime; nothing changed")


async def _add_type(queue: JobQueue, actor: Principal, job_type: str) -> str:
    """Add the type; what it was before: "added", "configured" (in --job-types) or "new"."""
    await queue.allowlist.current()
    was = "added" if job_type in queue.allowlist.added else "new"
    if was == "new" and job_type in queue.allowlist.configured:
        was = "configured"
    await queue.add_job_type(actor, job_type)
    return was
