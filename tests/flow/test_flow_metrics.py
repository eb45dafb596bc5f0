"""`/metrics` shows flow control (API.md section 9): per type, whether it is paused, how many
jobs run, the limits set (a limit cleared has no sample), and the claims a control held back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import Server, serving
from prometheus_client.parser import text_string_to_metric_families

SET = """mutation($input: TypeControlInput!) { setTypeControl(input: $input) { type } }"""
PAUSE = """mutation($type: String!) { pauseType(type: $type) { paused } }"""
RESUME = """mutation($type: String!) { resumeType(type: $type) { paused } }"""
ENQUEUE = """mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id } } }"""
CLAIM = """mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id type } }"""
CLAIM_WAITING = """mutation($types: [String!], $wait: Int) {
  claimJobs(limit: 1, types: $types, waitSeconds: $wait) { id } }"""
COMPLETE = """mutation($id: ID!) { completeJob(id: $id) { status } }"""


@pytest.fixture(scope="module")
def server(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with serving(backend, tmp_path_factory) as running:
        yield running


def samples(server: Server) -> dict[tuple[str, str], float]:
    """(sample name, type label) -> value, for the per-type samples."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    found: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "type" in sample.labels:
                found[sample.name, sample.labels["type"]] = sample.value
    return found


def test_metrics_show_each_types_pause_running_jobs_limits_and_held_claims(server: Server) -> None:
    worker = server.make_key("metrics-worker", "WORKER")
    server.gql(
        SET, {"input": {"type": "report", "maxRunning": 1, "rateLimit": {"limit": 50, "periodSeconds": 60}}}
    ).ok()
    server.gql(PAUSE, {"type": "resize"}).ok()
    for job_type in ("report", "report", "resize"):
        server.gql(ENQUEUE, {"type": job_type}).ok()
    claimed = server.gql(CLAIM, {"types": ["report", "resize"]}, key=worker).ok()["claimJobs"]
    assert [job["type"] for job in claimed] == ["report"]  # one running at most; resize is paused
    held_before = samples(server).get(("queuelog_claims_held_back_total", "report"), 0.0)
    assert server.gql(CLAIM, {"types": ["report"]}, key=worker).ok()["claimJobs"] == []

    seen = samples(server)
    assert seen["queuelog_type_paused", "resize"] == 1.0
    assert seen["queuelog_type_paused", "report"] == 0.0
    assert seen["queuelog_type_running", "report"] == 1.0
    assert seen["queuelog_type_max_running", "report"] == 1.0
    assert seen["queuelog_type_rate_limit", "report"] == 50.0
    assert seen["queuelog_type_rate_period_seconds", "report"] == 60.0
    assert ("queuelog_type_max_running", "email") not in seen  # no limit, no sample
    assert seen["queuelog_claims_held_back_total", "report"] == held_before + 1
    assert seen["queuelog_claims_held_back_total", "resize"] >= 1

    cleared = {"maxRunning": None, "maxRunningPerKey": None, "rateLimit": None, "timeoutSeconds": None}
    server.gql(SET, {"input": {"type": "report", **cleared}}).ok()  # an explicit null clears
    server.gql(RESUME, {"type": "resize"}).ok()
    seen = samples(server)
    assert ("queuelog_type_max_running", "report") not in seen
    assert ("queuelog_type_rate_limit", "report") not in seen
    assert seen["queuelog_type_paused", "resize"] == 0.0


def test_a_claim_waiting_on_a_rate_window_is_not_woken_by_its_types_jobs_finishing(server: Server) -> None:
    """A finishing job frees a slot of maxRunning, never of a rate window: only time does. A
    claim waiting on a full window must wait for the window, not claim again (and be held
    back again) each time a job of the type finishes, which under load made every waiting
    claim of a rate-limited type retry at the pace of its completions."""
    worker = server.make_key("rate-wait-worker", "WORKER")
    for _ in range(8):
        server.gql(ENQUEUE, {"type": "noop"}).ok()
    running = server.gql(CLAIM, {"types": ["noop"]}, key=worker).ok()["claimJobs"]  # before the limit
    assert len(running) == 8
    server.gql(SET, {"input": {"type": "noop", "rateLimit": {"limit": 1, "periodSeconds": 3600}}}).ok()
    for _ in range(2):
        server.gql(ENQUEUE, {"type": "noop"}).ok()
    assert (
        len(server.gql(CLAIM, {"types": ["noop"]}, key=worker).ok()["claimJobs"]) == 1
    )  # the window is full
    held_before = samples(server).get(("queuelog_claims_held_back_total", "noop"), 0.0)
    answer: dict[str, object] = {}

    def wait() -> None:
        answer["claimed"] = server.gql(CLAIM_WAITING, {"types": ["noop"], "wait": 3}, key=worker).ok()[
            "claimJobs"
        ]

    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.5)  # the claim is held back and waits
    for job in running:
        assert (
            server.gql(COMPLETE, {"id": job["id"]}, key=worker).ok()["completeJob"]["status"] == "COMPLETED"
        )
        time.sleep(0.1)
    waiting.join()
    assert answer["claimed"] == []  # the window stays full for an hour
    held = samples(server)["queuelog_claims_held_back_total", "noop"] - held_before
    # Held back when it began, and again only when its wait ends; not once per completion (8).
    assert 1 <= held <= 2, held
