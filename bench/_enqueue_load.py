"""The load of enqueue_http.py and multiprocess_enqueue.py: single `enqueueJob`s over HTTP.

This process is the load generator (uvloop + raw keep-alive HTTP/1.1 connections, bodies
built beforehand): C connections send up to N requests per round, one at a time each; a
round also stops starting requests after --round-seconds. Rounds alternate between two
targets (AB, BA, AB, ...) so that drift on a noisy machine hits both.

Here: the options both scripts share, the ENQUEUE document and its request bodies, the
response checks, the warm-up and the alternating rounds, and the report's comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping, Sequence

from _common import (
    Comparison,
    HttpConnection,
    Measurement,
    ServerProcess,
    common_arguments,
    graphql_body,
    measured,
    merge,
    phase,
    py_spy,
)

ENQUEUE = (
    "mutation Enqueue($input: EnqueueJobInput!) { enqueueJob(input: $input) { created job { id status } } }"
)
Check = Callable[[int, bytes], str | None]
Targets = Mapping[str, tuple[ServerProcess, dict[str, str]]]
# Entered around each round's load of one target; may give a callback for `drive`'s all_connected.
RoundHook = Callable[[str, ServerProcess], contextlib.AbstractContextManager[Callable[[], None] | None]]


# --- options ---------------------------------------------------------------------------------


def load_parser(description: str | None) -> argparse.ArgumentParser:
    """A parser with the load's options; the script adds its own, then calls `parse_load_args`."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="client connections (default 16)")
    parser.add_argument(
        "-n", "--requests", type=int, default=1000, help="requests per target per round (default 1000)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per target (default 3)")
    parser.add_argument(
        "--round-seconds",
        type=float,
        default=8.0,
        help="a round also ends after this long, with the requests done so far (default 8)",
    )
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests per target first (200)")
    parser.add_argument(
        "--payload-bytes", type=int, default=64, help="approximate size of each job's payload (64)"
    )
    return parser


def parse_load_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Add the options of every script (--json, --keep), parse, and check the load's bounds."""
    common_arguments(parser)
    args = parser.parse_args(argv)
    if not 1 <= args.concurrency <= 256 or not 1 <= args.requests <= 100_000 or not 1 <= args.rounds <= 20:
        parser.error("bounds: 1 <= concurrency <= 256, 1 <= requests <= 100000, 1 <= rounds <= 20")
    if not 0 < args.round_seconds <= 300:
        parser.error("bounds: 0 < round-seconds <= 300")
    return args


# --- requests and answers --------------------------------------------------------------------


def bodies(count: int, start: int, payload_bytes: int) -> list[bytes]:
    pad = "x" * max(0, payload_bytes - 40)
    return [
        graphql_body(
            ENQUEUE, {"input": {"type": "noop", "payload": {"n": i, "to": f"u{i}@example.com", "p": pad}}}
        )
        for i in range(start, start + count)
    ]


def check_enqueued(status: int, body: bytes) -> str | None:
    """An enqueueJob answer without errors that has a `created` field."""
    return _check(status, body, b'"created"')


def check_created(status: int, body: bytes) -> str | None:
    """An enqueueJob answer without errors that says `"created":true` (a new job was stored)."""
    return _check(status, body, b'"created":true')


def _check(status: int, body: bytes, needle: bytes) -> str | None:
    if status != 200 or b'"errors"' in body or needle not in body:
        return f"HTTP {status}: {body[:300]!r}"
    return None


# --- the load --------------------------------------------------------------------------------


async def drive(
    server: ServerProcess,
    headers: dict[str, str],
    payloads: list[bytes],
    concurrency: int,
    check: Check,
    seconds: float,
    all_connected: Callable[[], None] | None = None,
) -> tuple[list[float], list[str]]:
    """`concurrency` connections send `payloads` (each once), one request at a time each.

    No new request starts after `seconds`; the latencies of those done are returned.
    `all_connected` is called once, when every connection has had its first answer.
    """
    latencies: list[float] = []
    failures: list[str] = []
    pending = iter(payloads)
    deadline = time.perf_counter() + seconds
    answered_once = 0

    async def connection() -> None:
        nonlocal answered_once
        conn = HttpConnection(server.url, headers)
        first = True
        try:
            for body in pending:
                if time.perf_counter() > deadline:
                    return
                started = time.perf_counter()
                status, answer = await conn.post("/graphql", body)
                latencies.append(time.perf_counter() - started)
                if first:
                    first = False
                    answered_once += 1
                    if answered_once == concurrency and all_connected is not None:
                        all_connected()
                problem = check(status, answer)
                if problem is not None:
                    failures.append(problem)
        finally:
            await conn.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    return latencies, failures


async def load(
    label: str,
    server: ServerProcess,
    headers: dict[str, str],
    payloads: list[bytes],
    concurrency: int,
    seconds: float,
    check: Check,
    all_connected: Callable[[], None] | None = None,
) -> Measurement:
    """`drive` measured; exits with the server's log if any answer failed `check`."""
    failures: list[str] = []

    async def work() -> tuple[int, list[float]]:
        latencies, failed = await drive(server, headers, payloads, concurrency, check, seconds, all_connected)
        failures.extend(failed)
        return len(latencies), latencies

    result = await measured(label, work, server)
    if failures:
        raise SystemExit(
            f"{label}: {len(failures)} failed requests, first: {failures[0]}\n{server.log()[-2000:]}"
        )
    return result


def warm_up(
    runner: asyncio.Runner, args: argparse.Namespace, targets: Targets, check: Check
) -> dict[str, Measurement]:
    """`--warmup` untimed requests to each target in turn; their measurements by target."""
    done: dict[str, Measurement] = {}
    with phase(f"warm-up ({args.warmup} requests each)"):
        for name, (server, headers) in targets.items():
            payloads = bodies(args.warmup, 10_000_000, args.payload_bytes)
            done[name] = runner.run(
                load(
                    name,
                    server,
                    headers,
                    payloads,
                    min(args.concurrency, args.warmup),
                    args.round_seconds,
                    check,
                )
            )
    return done


def alternating_rounds(
    runner: asyncio.Runner,
    args: argparse.Namespace,
    targets: Targets,
    check: Check,
    profile_pid: int | None,
    each_round: RoundHook | None = None,
) -> dict[str, list[Measurement]]:
    """`--rounds` rounds of up to `-n` requests per target, by target.

    The two `targets` take turns in their order, then the other way round (AB, BA, AB, ...);
    with --py-spy, process `profile_pid` is sampled meanwhile. `each_round(name, server)` is
    entered around each round's load, and what it gives is called once all connections of
    that round have had their first answer.
    """
    first, second = targets
    rounds: dict[str, list[Measurement]] = {name: [] for name in targets}
    rounds_phase = phase(f"{args.rounds} rounds x {args.requests} requests per target, C={args.concurrency}")
    with rounds_phase, py_spy(profile_pid, args.py_spy):
        for r in range(args.rounds):
            order = [first, second] if r % 2 == 0 else [second, first]
            for name in order:
                server, headers = targets[name]
                payloads = bodies(args.requests, r * args.requests, args.payload_bytes)
                hook = each_round(name, server) if each_round is not None else contextlib.nullcontext()
                with hook as all_connected:
                    measurement = load(
                        name,
                        server,
                        headers,
                        payloads,
                        args.concurrency,
                        args.round_seconds,
                        check,
                        all_connected,
                    )
                    rounds[name].append(runner.run(measurement))
                time.sleep(0.2)
    return rounds


# --- the report ------------------------------------------------------------------------------


def per_round_ratios(baseline: Sequence[Measurement], subject: Sequence[Measurement]) -> str:
    """Baseline / subject throughput of each round, e.g. "4.78x  4.39x  4.76x"."""
    ratios = [b.throughput / s.throughput for b, s in zip(baseline, subject, strict=True)]
    return "  ".join(f"{x:.2f}x" for x in ratios)


def rounds_comparison(
    args: argparse.Namespace,
    title: str,
    subject: tuple[str, Sequence[Measurement]],
    baseline: tuple[str, Sequence[Measurement]],
) -> Comparison:
    """The pooled rounds of the subject and the baseline, each given as (label, rounds)."""
    return Comparison(
        title=title,
        subject=merge(*subject),
        baseline=merge(*baseline),
        unit="req/s",
        note=f"{args.rounds} rounds of up to {args.requests} requests or {args.round_seconds:g} s each",
    )
