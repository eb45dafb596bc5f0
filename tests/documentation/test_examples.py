"""The README's example producer and worker, run as a new user would, against a real server."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import Server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_example_producer_and_worker_complete_every_job(
    start_server: Callable[..., Server], unique: Callable[[str], str]
) -> None:
    server = start_server(job_types="email,report")
    worker_key = server.make_key(unique("worker"), "worker")
    producer_key = server.make_key(unique("producer"), "producer")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "queuelog",
            "worker",
            "--url",
            server.url,
            "--key",
            worker_key,
            "--handlers",
            "handlers:HANDLERS",
        ],
        cwd=EXAMPLES,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        producer = subprocess.run(
            [sys.executable, str(EXAMPLES / "producer.py"), server.url, producer_key],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        _, worker_log = worker.communicate(timeout=30)
    assert producer.returncode == 0, producer.stderr
    lines = producer.stdout.strip().splitlines()
    assert len(lines) == 4, producer.stdout
    assert all(" COMPLETED " in line for line in lines), producer.stdout
    assert "{'sent_to': 'user0@example.com'}" in lines[0]
    assert lines[3].endswith("{'rows': 42}"), "the flaky report job is retried, then completes"
    assert worker.returncode == 0, worker_log
    assert '"outcome": "retrying"' in worker_log and '"outcome": "completed"' in worker_log
