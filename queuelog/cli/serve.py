"""`queuelog serve` and `queuelog copy-database`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
from typing import TYPE_CHECKING

from queuelog import logformat
from queuelog.cli.database import open_migrated, safe_url
from queuelog.cli.errors import PROG, CommandError
from queuelog.settings import (
    Settings,
    env_name,
    public_fields,
)

if TYPE_CHECKING:
    pass
SHUTDOWN_GRACE_SECONDS = 5
serve_log = logging.getLogger("queuelog.serve")


def cmd_copy_database(args: argparse.Namespace) -> None:
    from queuelog.storage import copy

    copy.check_urls(args.source, args.target)
    target = open_migrated(args.target)  # first: an unreachable target leaves the source as it is
    try:
        source = open_migrated(args.source)
        try:
            copied = copy.copy_database(source, target, replace=args.replace)
        finally:
            source.dispose()
    finally:
        target.dispose()
    rows = copied.rows
    print(
        f"copied {rows['jobs']} jobs, {rows['job_events']} job events, {rows['api_keys']} API keys, "
        f"{rows['type_controls']} type controls and {rows['schedules']} schedules "
        f"to {safe_url(args.target)}; new jobs start at id {copied.next_job_id}"
    )


def cmd_serve(args: argparse.Namespace) -> None:
    import uvicorn

    from queuelog import keys

    overrides = {f.name: getattr(args, f.name) for f in public_fields()}
    raw = {k: v for k, v in overrides.items() if v is not None and not isinstance(v, bool)}
    settings = Settings.from_env(
        {**os.environ, **{env_name(k): str(v) for k, v in raw.items()}},
        **{k: v for k, v in overrides.items() if isinstance(v, bool)},
    )
    if args.workers < 1:
        raise CommandError("--workers must be at least 1")
    as_json = settings.log_format == "json"
    if as_json:
        logformat.configure("json")
    engine = open_migrated(settings.database_url)
    try:
        created = keys.bootstrap_admin(engine)
    finally:
        engine.dispose()
    if created is not None:
        record, plaintext = created
        if as_json:
            serve_log.warning(
                "This database had never had an API key, so an ADMIN key named %r was created. It is"
                " shown only this once, as admin_key: store it now",
                record.name,
                extra={"admin_key": plaintext},
            )
        else:
            print(
                f"This database had never had an API key, so an ADMIN key named {record.name!r} was created."
            )
            print("It is shown only this once; store it now:")
            print(f"\n    {plaintext}\n", flush=True)
    notes = []
    if not settings.job_types:
        notes.append(
            f"note: {env_name('job_types')} is empty, so only the types an ADMIN adds at runtime"
            f" (addJobType, `{PROG} types add NAME`) can be enqueued; pass --job-types a,b to allow"
            " job types."
        )
    base = f"http://{args.host}:{args.port}"
    notes.append(f"queuelog serving {safe_url(settings.database_url)} on {base}")
    if settings.dashboard:
        notes.append(f"Dashboard: open {base}/ and enter a key")
    if settings.graphiql:
        notes.append(f"GraphiQL: open {base}/graphql and enter a key in its key box")
    for note in notes:
        if as_json:
            serve_log.info(note)
        else:
            print(note, flush=True)
    os.environ.update(settings.to_env())
    log_config = logformat.uvicorn_log_config(settings.log_format)
    if args.workers == 1:
        # uvicorn stops gracefully on SIGTERM, then raises the signal again under the handler it
        # found: Python's default would end the process by the signal (exit status 143).
        signal.signal(signal.SIGTERM, _exit_stopped)
    uvicorn.run(
        "queuelog.app:create_app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers if args.workers > 1 else None,
        log_level=args.log_level,
        proxy_headers=False,
        # API.md section 1: a websocket message larger than the body limit is not parsed (1009).
        ws_max_size=settings.max_body_bytes,
        # Long-polling claims may wait 30 s; do not let them hold a shutdown that long.
        timeout_graceful_shutdown=SHUTDOWN_GRACE_SECONDS,
        log_config=log_config,
    )


def _exit_stopped(signum: int, frame: object) -> None:
    """SIGTERM outside uvicorn's own handler: before it serves (nothing to stop yet), or raised
    again by uvicorn once it has stopped gracefully. Either way a stop, not a failure: exit 0."""
    raise SystemExit(0)
