"""Single `enqueueJob` over HTTP: `queuelog serve --workers 2` vs `--workers 1`, one SQLite file each.

Starts two queuelog servers, each on its own fresh temp SQLite file and free loopback port:

- subject: `python -m queuelog serve --workers 2 --job-types noop --log-level warning`, so
  uvicorn's supervisor process and two worker processes share one database; their writes
  are serialised across processes by the flock beside it (queuelog/storage/write_lock.py);
- baseline: the same with `--workers 1` (one process, as in enqueue_http.py).

Each gets a PRODUCER key (`queuelog keys create --role producer`). The load is the one of
enqueue_http.py: this process (uvloop + raw keep-alive HTTP/1.1 connections, bodies built
beforehand), C connections send up to N requests per round, one at a time each; a round
also stops starting requests after --round-seconds. The connections are opened afresh each
round, and with --workers 2 the kernel spreads them over the two processes (they accept on
one shared socket). Rounds alternate between the two targets (AB, BA, AB, ...) so that drift
on a noisy machine hits both. Server CPU is that of the whole process tree (supervisor,
workers, multiprocessing's resource tracker), read from /proc.

    .venv/bin/python bench/multiprocess_enqueue.py                   # defaults, under 60 s
    .venv/bin/python bench/multiprocess_enqueue.py -c 32 -n 2000 --rounds 4
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    STARTUP_TIMEOUT,
    Cleanup,
    ServerProcess,
    bearer,
    event_loop_runner,
    machine_line,
    make_keys,
    phase,
    print_report,
    process_cpu_seconds,
    sqlite_url,
    start_queuelog,
    stderr,
)
from _enqueue_load import (  # noqa: E402
    alternating_rounds,
    check_created,
    load_parser,
    parse_load_args,
    per_round_ratios,
    rounds_comparison,
    warm_up,
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = load_parser(__doc__)
    parser.add_argument(
        "--workers", type=int, default=2, help="server processes of the subject (default 2; baseline: 1)"
    )
    parser.add_argument(
        "--py-spy",
        metavar="PATH",
        help="profile the subject's first worker process with py-spy during the rounds "
        "(.svg flamegraph, .txt collapsed)",
    )
    args = parse_load_args(parser, argv)
    if not 2 <= args.workers <= 8:
        parser.error("bounds: 2 <= workers <= 8")
    return args


# --- the server's process tree ---------------------------------------------------------------


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid`: /proc/PID/task/*/children, else a scan of every PPid."""
    children_files = list(Path(f"/proc/{pid}/task").glob("*/children"))
    if children_files:
        found: list[int] = []
        for path in children_files:
            with contextlib.suppress(OSError):
                found.extend(int(x) for x in path.read_text().split())
        return found
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants."""
    tree, todo = [pid], [pid]
    while todo:
        children = child_pids(todo.pop())
        tree.extend(children)
        todo.extend(children)
    return tree


def tree_cpu_seconds(pid: int) -> float | None:
    """User + system CPU of `pid` and its live descendants, all threads; None if `pid` is gone."""
    own = process_cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(process_cpu_seconds(child) or 0.0 for child in process_tree(pid)[1:])


def start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: tells a process apart from a later one with the same pid."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return None


def holds_file(pid: int, path: str) -> bool:
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == path:
                    return True
    return False


@dataclass
class ServerTree(ServerProcess):
    """A `queuelog serve` whose CPU is that of its whole process tree."""

    workers: list[int] = field(default_factory=list)  # the processes serving requests

    def cpu_seconds(self) -> float | None:
        return tree_cpu_seconds(self.process.pid)


def wait_workers(server: ServerProcess, database: Path, count: int) -> ServerTree:
    """Wait until `count` processes of the tree have the app up (they hold the write-lock file).

    /healthz answers as soon as the first worker serves; the others may still be starting.
    """
    lock = str(Path(f"{database}-queuelog.lock").resolve())
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        holders = [pid for pid in process_tree(server.process.pid) if holds_file(pid, lock)]
        if len(holders) >= count:
            tree = ServerTree(**{f.name: getattr(server, f.name) for f in fields(ServerProcess)})
            tree.workers = sorted(holders)
            return tree
        if server.process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server.name}: {len(holders)} of {count} workers up\n{server.log()}")
        time.sleep(0.05)


def stop_leftovers(processes: dict[int, str | None]) -> None:
    """SIGKILL any recorded server process that outlived its stopped parent (normally none)."""
    for pid, started in processes.items():
        if started is not None and start_time(pid) == started:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def connections_per_worker(server: ServerTree) -> list[int]:
    """Established TCP connections to the server's port held by each worker process.

    Matches the socket inodes in /proc/PID/fd against /proc/net/tcp (IPv4 loopback only).
    """
    owner: dict[str, int] = {}
    for index, pid in enumerate(server.workers):
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:["):
                        owner[link[8:-1]] = index
    counts = [0] * len(server.workers)
    local_port = f":{server.port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        if parts[1].endswith(local_port) and parts[3] == "01" and parts[9] in owner:  # 01: ESTABLISHED
            counts[owner[parts[9]]] += 1
    return counts


def jobs_in(database: Path) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        return int(db.execute("SELECT count(*) FROM jobs").fetchone()[0])


def worker_cpu(server: ServerTree) -> list[float]:
    return [process_cpu_seconds(pid) or 0.0 for pid in server.workers]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    machine = machine_line()
    one, many = "workers=1", f"workers={args.workers}"
    with Cleanup(keep=args.keep) as cleanup, event_loop_runner() as runner:
        work = cleanup.workdir
        spawned: dict[int, str | None] = {}
        cleanup.callback(stop_leftovers, spawned)  # runs after the servers' stop (LIFO)
        targets: dict[str, tuple[ServerTree, dict[str, str]]] = {}
        databases: dict[str, Path] = {}
        with phase("starting servers"):
            for name, count in ((one, 1), (many, args.workers)):
                database = work / f"queuelog-{name.replace('=', '')}.db"
                url = sqlite_url(database)
                started = cleanup.server(
                    start_queuelog(
                        work, url, extra_args=["--workers", str(count)], name=name.replace("=", "")
                    )
                )
                server = wait_workers(started, database, count)
                spawned.update({pid: start_time(pid) for pid in process_tree(server.process.pid)[1:]})
                producer = make_keys(url, [("bench-producer", "producer")])["bench-producer"]
                targets[name] = (server, bearer(producer))
                databases[name] = database
        subject = targets[many][0]
        stderr(f"    {many}: supervisor pid {subject.process.pid}, worker pids {subject.workers}")

        sent = {name: m.ops for name, m in warm_up(runner, args, targets, check_created).items()}
        splits: list[list[float]] = []
        spread: list[list[int]] = []

        @contextlib.contextmanager
        def observe(name: str, _: ServerProcess) -> Iterator[Callable[[], None]]:
            """Per round: the connections each worker holds, and (for the subject) the CPU split."""
            server = targets[name][0]
            before = worker_cpu(server)
            counted: list[list[int]] = []
            yield lambda: counted.append(connections_per_worker(server))
            if name == many:
                splits.append([a - b for a, b in zip(worker_cpu(server), before, strict=True)])
                spread.append(counted[0] if counted else [])

        rounds = alternating_rounds(runner, args, targets, check_created, subject.workers[0], observe)
        for name, database in databases.items():
            sent[name] += sum(m.ops for m in rounds[name])
            stored = jobs_in(database)
            if stored != sent[name]:
                raise SystemExit(f"{name}: {sent[name]} enqueues answered created, but {stored} jobs stored")

    per_round = per_round_ratios(rounds[one], rounds[many])
    comparison = rounds_comparison(
        args,
        f"enqueueJob, single job per request, C={args.concurrency}, one SQLite file per server",
        subject=(f"queuelog --workers {args.workers}", rounds[many]),
        baseline=("queuelog --workers 1", rounds[one]),
    )
    print_report(f"bench/multiprocess_enqueue.py  ({machine})", [comparison], args.json)
    print(
        f"here the baseline is --workers 1 and 'queuelog' is --workers {args.workers}; srv CPU/op sums the\n"
        "whole process tree of each server (supervisor, workers, resource tracker)."
    )
    print("per-round throughput ratio (workers=1 / workers=N): " + per_round)
    print(
        "per-round connections per worker process: "
        + "  ".join("/".join(str(n) for n in counts) if counts else "-" for counts in spread)
    )
    print(
        "per-round CPU split over the worker processes: "
        + "  ".join("/".join(f"{100 * s / (sum(split) or 1):.0f}" for s in split) + " %" for split in splits)
    )
    speedup = 1 / comparison.throughput_ratio
    print(f"--workers {args.workers} throughput = {speedup:.2f}x that of --workers 1 (above 1.00x: faster)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        stderr("interrupted")
        sys.exit(130)
