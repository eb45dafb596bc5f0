"""`queuelog worker`: run job handlers from Python code."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from queuelog import logformat
from queuelog.cli.errors import PROG, CommandError, KeyRefusedError
from queuelog.errors import echo
from queuelog.settings import (
    LOG_FORMATS,
    env_name,
)

if TYPE_CHECKING:
    from queuelog.worker import Handler
API_KEY_VARIABLE = "QUEUELOG_API_KEY"  # queuelog.client's, named here without importing httpx


def load_handlers(spec: str) -> dict[str, Handler]:
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise CommandError(f"--handlers takes module:attr, not {echo(spec)}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandError(f"cannot import {echo(module_name)}: {exc}") from None
    handlers = getattr(module, attr, None)
    if not isinstance(handlers, dict) or not handlers:
        raise CommandError(f"{spec} must be a non-empty dict {{job_type: handler}}")
    bad = [name for name, handler in handlers.items() if not callable(handler)]
    if bad:
        raise CommandError(f"handlers for {', '.join(map(str, bad))} are not callable")
    return handlers


def worker_key(given: str | None) -> str:
    """--key, else $QUEUELOG_API_KEY."""
    from queuelog.client import MissingKey, resolve_key

    try:
        return resolve_key(given)
    except MissingKey:
        raise CommandError(f"no API key: set {API_KEY_VARIABLE} (or pass --key, which ps shows)") from None


def worker_log_format(given: str | None) -> str:
    """--log-format, else $QUEUELOG_LOG_FORMAT, else text."""
    chosen = (given or os.environ.get(env_name("log_format")) or "text").strip().lower()
    if chosen not in LOG_FORMATS:
        raise CommandError(
            f"{env_name('log_format')} must be one of {', '.join(LOG_FORMATS)}, not {echo(chosen)}"
        )
    return chosen


# What to do about a refused key, by the server's code (the worker's message says what happened).
KEY_REFUSED_HINTS = {
    "UNAUTHENTICATED": f"check --key or ${API_KEY_VARIABLE}",
    "FORBIDDEN": f"make one with `{PROG} keys create --name NAME --role worker`",
}


def cmd_worker(args: argparse.Namespace) -> None:
    from queuelog.worker import KeyRefused, Worker

    log_format = worker_log_format(args.log_format)
    if log_format == "json":
        logformat.configure("json")
    if args.concurrency < 1:
        raise CommandError("--concurrency must be at least 1")
    if args.grace < 0:
        raise CommandError("--grace must not be negative")
    key = worker_key(args.key)
    handlers = load_handlers(args.handlers)
    types = ", ".join(sorted(handlers))
    banner = f"queuelog worker: {types} from {args.url} (concurrency {args.concurrency})"
    if log_format == "json":
        logging.getLogger("queuelog.worker").info(banner)
    else:
        print(banner, file=sys.stderr, flush=True)
    worker = Worker(args.url, key, handlers, concurrency=args.concurrency, grace=args.grace)
    try:
        worker.run_forever(log_format=log_format)
    except KeyRefused as exc:
        hint = KEY_REFUSED_HINTS.get(exc.code)
        raise KeyRefusedError(f"{exc}; {hint}" if hint else str(exc)) from None
