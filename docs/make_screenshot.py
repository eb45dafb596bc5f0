"""Regenerate docs/dashboard.png, the README's screenshot of the jobs dashboard.

Run it from the repository root with the project's venv (playwright comes with '.[test]';
the browser is Debian's chromium at /usr/bin/chromium):

    .venv/bin/python docs/make_screenshot.py               # 3.2 to 4.3 minutes
    .venv/bin/python docs/make_screenshot.py --minutes 1   # 1.2 to 2.3 minutes, one point

It starts its own `queuelog serve` on a free 127.0.0.1 port with a fresh SQLite file in a
temporary directory, and fills the queue only through the public GraphQL API: a producer
enqueues jobs of mixed types and priorities, and three simulated workers complete most and
fail some, faster in some minutes than in others. The workers start on a wall-clock minute
(up to a minute's wait) and work for --minutes full minutes (default 3): the server counts
finished jobs per minute (queueStats.throughput), so these are the sparkline's points.

Then a long report starts, a webhook job fails with "upstream answered 503", is retried at
once and fails for good, and two waiting jobs are cancelled. Only then does chromium open
the page (every request not to 127.0.0.1 is aborted), sign in with the ADMIN key and open
that webhook job's detail. The server and the temporary directory go away on exit, on
error and on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Route, sync_playwright

JOB_TYPES = ("email", "report", "resize", "webhook")
WORKER_NAMES = ("worker-1", "worker-2", "worker-3")
MINUTE_SPEEDS = (1.2, 0.6, 1.1, 0.8, 1.4)  # how fast the workers go in each minute, in turn
BACKLOG_PER_MINUTE = 100  # jobs enqueued up front per minute of work (the workers finish 50 to 120)
# per job type: the seconds it takes (at speed 1), and failJob's arguments for the 5 % that fail
HANDLERS: dict[str, tuple[float, float, dict[str, Any]]] = {
    "email": (0.5, 1.8, {"error": "550 5.1.1 mailbox unavailable", "retryable": False}),
    "report": (4, 10, {"error": "statement timeout after 30 s", "retryable": True}),
    "resize": (1.2, 3.5, {"error": "cannot decode image: truncated JPEG", "retryable": False}),
    "webhook": (0.3, 1.5, {"error": "upstream answered 502", "retryable": True, "retryIn": 5}),
}
FLAKY_HOST = "hooks.partner.example"  # webhooks to it always answer 503
CHROMIUM = "/usr/bin/chromium"
DEFAULT_OUTPUT = Path(__file__).resolve().parent / "dashboard.png"
BOOTSTRAP_KEY = re.compile(r"ql_[A-Za-z0-9_-]{20,}")
NOT_LOCAL = re.compile(r"^(?!(https?|wss?)://127\.0\.0\.1[:/])")  # any URL not to 127.0.0.1
QUEUELOG = [sys.executable, "-m", "queuelog"]
# this environment without QUEUELOG_* variables, so the user's settings change nothing
PLAIN_ENVIRONMENT = {name: value for name, value in os.environ.items() if not name.startswith("QUEUELOG_")}

ENQUEUE = "mutation($input: EnqueueJobInput!) { enqueueJob(input: $input) { job { id } } }"
CLAIM = "mutation($types: [String!]) { claimJob(types: $types, waitSeconds: 2) { id type payload attempt } }"
COMPLETE = """mutation($id: ID!, $attempt: Int, $result: JSON) {
  completeJob(id: $id, attempt: $attempt, result: $result) { id } }"""
FAIL = """mutation($id: ID!, $attempt: Int, $error: String!, $retryable: Boolean!, $retryIn: Int) {
  failJob(id: $id, attempt: $attempt, error: $error, retryable: $retryable, retryInSeconds: $retryIn) {
    id } }"""
CANCEL = "mutation($id: ID!) { cancelJob(id: $id) { id } }"
PENDING = "query { jobs(status: PENDING, first: 20) { nodes { id priority } } }"
STATUS = "query($id: ID!) { job(id: $id) { status } }"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Api:
    """The public GraphQL API with one key. One per thread: each has its own connection."""

    def __init__(self, url: str, key: str) -> None:
        self.client = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)

    def run(self, document: str, **variables: Any) -> dict[str, Any]:
        body = self.client.post("/graphql", json={"query": document, "variables": variables}).json()
        if body.get("errors"):
            raise RuntimeError(f"GraphQL error: {body['errors'][0].get('message')}")
        return body["data"]

    def enqueue(self, job_type: str, payload: dict[str, Any], priority: str, max_retries: int = 3) -> str:
        job = {"type": job_type, "payload": payload, "priority": priority, "maxRetries": max_retries}
        return self.run(ENQUEUE, input=job)["enqueueJob"]["job"]["id"]


def start_server(directory: Path, database_url: str, cleanup: contextlib.ExitStack) -> tuple[str, str]:
    """`queuelog serve` on a free port: its URL, and the ADMIN key it printed on its first start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log_path = directory / "server.log"
    with log_path.open("wb") as log_file:
        command = [*QUEUELOG, "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
        command += ["--database-url", database_url, "--job-types", ",".join(JOB_TYPES)]
        server = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=PLAIN_ENVIRONMENT)
    cleanup.callback(stop_server, server)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and server.poll() is None:
        with contextlib.suppress(httpx.HTTPError):
            healthy = httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            if healthy and (key := BOOTSTRAP_KEY.search(log_path.read_text())):
                return url, key.group(0)
        time.sleep(0.1)
    raise RuntimeError(f"the server did not come up with an ADMIN key:\n{log_path.read_text()}")


def stop_server(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def create_key(database_url: str, name: str, role: str, *options: str) -> str:
    """`queuelog keys create`, as an operator would run it: the new key."""
    command = [*QUEUELOG, "keys", "create", "--name", name, "--role", role, "--database-url", database_url]
    done = subprocess.run(
        [*command, *options], check=True, capture_output=True, text=True, env=PLAIN_ENVIRONMENT
    )
    return done.stdout.strip().splitlines()[-1]


def enqueue_random_job(producer: Api, rng: random.Random) -> None:
    number = rng.randint(1000, 99999)
    job_type = rng.choices(JOB_TYPES, weights=(45, 10, 20, 25))[0]
    payload = {
        "email": {"to": f"user{number}@example.com", "template": rng.choice(["welcome", "receipt"])},
        "report": {"report": rng.choice(["sales-by-region", "inventory", "churn"]), "month": "2026-11"},
        "resize": {"image": f"uploads/{number}.jpg", "widths": [320, 640, 1280]},
        "webhook": {"url": "https://hooks.shop.example/events", "event": "order.paid", "order": number},
    }[job_type]
    producer.enqueue(job_type, payload, rng.choices(("LOW", "MEDIUM", "HIGH"), weights=(55, 30, 15))[0])


def produce(producer: Api, minutes: int, stop: threading.Event) -> None:
    """A backlog that lasts the minutes of work, then one job every 1.5 s on average."""
    rng = random.Random(1)
    for _ in range(BACKLOG_PER_MINUTE * minutes):
        enqueue_random_job(producer, rng)
    while not stop.wait(rng.expovariate(1 / 1.5)):
        enqueue_random_job(producer, rng)


def handle(job: dict[str, Any], rng: random.Random) -> tuple[float, dict[str, Any]]:
    """How long `job` takes (at speed 1), and completeJob's or failJob's arguments."""
    if FLAKY_HOST in str(job["payload"].get("url")):
        return 1.0, {"error": "upstream answered 503", "retryable": True, "retryIn": 0}
    if job["payload"].get("report") == "year-to-date":
        return 90, {"result": {"rows": 1_204_311, "format": "parquet"}}
    shortest, longest, failure = HANDLERS[job["type"]]
    seconds = rng.uniform(shortest, longest)
    if rng.random() < 0.05:
        return seconds, failure
    return seconds, {"result": {"ok": True, "ms": round(seconds * 1000)}}


def work(worker: Api, seed: int, started: float, stop: threading.Event) -> None:
    """Claim any job, 'run' it at this minute's speed, complete or fail it; until stopped."""
    rng = random.Random(seed)
    while not stop.is_set():
        job = worker.run(CLAIM, types=list(JOB_TYPES))["claimJob"]
        if job is None:
            continue
        seconds, ending = handle(job, rng)
        speed = MINUTE_SPEEDS[int((time.time() - started) // 60) % len(MINUTE_SPEEDS)]
        if stop.wait(seconds / speed):
            return  # the job stays RUNNING; the server goes away with it
        worker.run(FAIL if "error" in ending else COMPLETE, id=job["id"], attempt=job["attempt"], **ending)


def wait(seconds: float, clients: list[Future[None]]) -> None:
    """Sleep, but raise at once if the producer or a worker failed (they run until stopped)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if stopped := [client for client in clients if client.done()]:
            raise RuntimeError("a producer or worker thread stopped") from stopped[0].exception()
        time.sleep(0.2)


def fail_flaky_webhook(producer: Api, admin: Api, clients: list[Future[None]]) -> str:
    """A webhook whose endpoint answers 503, with one retry: its id, once it failed for good."""
    payload = {"url": f"https://{FLAKY_HOST}/orders", "event": "order.shipped", "order": 82644}
    job_id = producer.enqueue("webhook", payload, "HIGH", max_retries=1)
    for _ in range(120):
        wait(0.5, clients)
        if admin.run(STATUS, id=job_id)["job"]["status"] == "FAILED":
            return job_id
    raise RuntimeError(f"webhook job {job_id} did not fail within a minute")


def cancel_two_pending(producer: Api) -> list[str]:
    """The producer changes its mind about two of its newest LOW jobs that still wait."""
    cancelled: list[str] = []
    for job in producer.run(PENDING)["jobs"]["nodes"]:
        if job["priority"] == "LOW" and len(cancelled) < 2:
            with contextlib.suppress(RuntimeError):  # claimed meanwhile: try the next one
                cancelled.append(producer.run(CANCEL, id=job["id"])["cancelJob"]["id"])
    return cancelled


def abort(route: Route) -> None:
    log(f"aborted a request to {route.request.url}")
    route.abort()


def screenshot(url: str, admin_key: str, job_id: str) -> bytes:
    """Sign in with the ADMIN key, open the job's detail, wait until all is drawn: the page's PNG."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 1000}, service_workers="block")
            page.set_default_timeout(30_000)
            page.route(NOT_LOCAL, abort)
            page.route_web_socket(NOT_LOCAL, lambda socket: socket.close())
            page.goto(f"{url}/")
            page.fill("input[name=key]", admin_key)
            page.press("input[name=key]", "Enter")
            page.wait_for_selector('#live[data-live="live"]')
            page.evaluate("id => { window.location.hash = `job/${id}`; }", job_id)
            page.wait_for_function(
                """() => document.querySelector('#sparkline polyline.completed')
                  && !document.getElementById('throughput-text').textContent.startsWith('Loading')
                  && document.querySelector('#jobs tbody tr[data-job-id]')
                  && document.querySelectorAll('#timeline li').length >= 5
                  && document.getElementById('detail-error').textContent.includes('503')"""
            )
            points = (page.get_attribute("#sparkline polyline.completed", "points") or "").split()
            busy = sum(1 for point in points if float(point.split(",")[1]) < 60)
            log(f"the sparkline has {busy} of {len(points)} minutes with completed jobs")
            page.mouse.move(0, 0)
            return page.screenshot(full_page=True)
        finally:
            browser.close()


def make_screenshot(minutes: int) -> bytes:
    with contextlib.ExitStack() as cleanup:
        directory = Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="queuelog-screenshot-")))
        database_url = f"sqlite:///{directory / 'queuelog.db'}"
        url, admin_key = start_server(directory, database_url, cleanup)
        log(f"serving {url} from {directory}")
        producer_key = create_key(database_url, "shop-backend", "producer", "--max-priority", "high")
        worker_keys = [create_key(database_url, name, "worker") for name in WORKER_NAMES]

        threads = cleanup.enter_context(ThreadPoolExecutor(max_workers=1 + len(worker_keys)))
        stop = threading.Event()
        cleanup.callback(stop.set)  # before the pool waits for its threads (last in, first out)
        clients = [threads.submit(produce, Api(url, producer_key), minutes, stop)]
        started = (time.time() // 60 + 1) * 60  # the next wall-clock minute
        log(f"the workers start in {started - time.time():.0f} s and work for {minutes} min")
        wait(started - time.time(), clients)
        for seed, key in enumerate(worker_keys):
            clients.append(threads.submit(work, Api(url, key), seed, started, stop))
        wait(started + minutes * 60 - time.time(), clients)

        producer, admin = Api(url, producer_key), Api(url, admin_key)
        producer.enqueue("report", {"report": "year-to-date", "month": "2026-11"}, "HIGH")  # stays RUNNING
        job_id = fail_flaky_webhook(producer, admin, clients)
        log(f"webhook job {job_id} failed; cancelled jobs {', '.join(cancel_two_pending(producer))}")
        return screenshot(url, admin_key, job_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=3, help="full minutes of work, the sparkline's points")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="default: docs/dashboard.png")
    arguments = parser.parse_args()
    if not 1 <= arguments.minutes <= 30:
        parser.error("--minutes must be between 1 and 30")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # unwind as Ctrl-C does
    began = time.monotonic()
    arguments.output.write_bytes(make_screenshot(arguments.minutes))
    size = arguments.output.stat().st_size // 1024
    log(f"wrote {arguments.output} ({size} KB) in {time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
