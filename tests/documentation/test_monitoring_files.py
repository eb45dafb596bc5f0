"""deploy/prometheus/ and deploy/grafana/: the alert rules, the scrape configuration and the
dashboard that docs/monitoring.md shows.

- alerts.yml passes `promtool check rules`, and `promtool test rules` feeds each alert series
  that must and must not fire it; prometheus.yml passes `promtool check config`.
- Every metric (and every label it is filtered or grouped by) that an alert or a dashboard
  panel names is in a real scrape of a server that enqueued, claimed, completed and failed jobs.
- A real Prometheus, run with prometheus.yml (its targets and token file swapped for the test
  server's), scrapes the server with the bearer token, and evaluates every alert and panel
  expression without an error.
- The dashboard JSON has the structure Grafana imports: panels with a grid position and a
  datasource, targets with a PromQL expression and a unique refId.

promtool and prometheus come with Debian's `prometheus` package; without them those tests skip,
unless QUEUELOG_TEST_REQUIRE_PROMTOOL=1 (CI), where they fail.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from conftest import Server, free_port, serving
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SCRAPE_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "queuelog.json"
REQUIRE_PROMTOOL = os.environ.get("QUEUELOG_TEST_REQUIRE_PROMTOOL") == "1"
METRICS_TOKEN = "monitoring-files-token"
# Labels Prometheus adds to every scraped series.
TARGET_LABELS = {"job", "instance"}
ALERT_NAMES = {
    "QueuelogQueueLagHigh",
    "QueuelogNoWorkerClaiming",
    "QueuelogFailureRateHigh",
    "QueuelogDatabaseUnavailable",
    "QueuelogDown",
}


def unavailable(reason: str) -> NoReturn:
    if REQUIRE_PROMTOOL:
        pytest.fail(f"{reason} and QUEUELOG_TEST_REQUIRE_PROMTOOL=1")
    pytest.skip(reason)


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (apt-get install prometheus)")
    return path


def load_yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError:
        unavailable("PyYAML is not installed (pip install pyyaml)")
    return yaml.safe_load(path.read_text())


def dump_yaml(value: Any, path: Path) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(value, sort_keys=False))
    return path


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=120)


# --- PromQL: the metrics and labels an expression reads -------------------------------------------

STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
RANGE = re.compile(r"\[[^\]]*\]")
LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?\s*(\()?")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def read_by(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """(metric name -> label names its selectors match on, label names grouped or joined on).
    Functions and aggregations are the names followed by '('; numbers are no names."""
    text = RANGE.sub("", STRING.sub('""', expr))
    grouping = {
        label.strip()
        for _, labels in LABEL_LIST.findall(text)
        for label in labels.split(",")
        if label.strip()
    }
    text = LABEL_LIST.sub(" ", text)
    metrics: dict[str, set[str]] = {}
    for name, matchers, call in SELECTOR.findall(text):
        if call or name in KEYWORDS:
            continue
        metrics.setdefault(name, set()).update(MATCHER.findall(matchers))
    return metrics, grouping


def test_the_promql_reader_finds_metrics_and_labels() -> None:
    metrics, grouping = read_by(
        "histogram_quantile(0.99, sum by (le, operation)"
        ' (rate(a_bucket{job="$job", path!="/x"}[$__rate_interval])))'
        ' / on (type) group_left (x) max(b) unless c > 0 and d{s=~"p{1}"} offset 5m'
    )
    assert metrics == {"a_bucket": {"job", "path"}, "b": set(), "c": set(), "d": {"s"}}
    assert grouping == {"le", "operation", "type", "x"}


# --- the files ---------------------------------------------------------------------------------------


def alert_rules() -> list[dict[str, Any]]:
    groups = load_yaml(ALERTS)["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its variables' queries."""
    queries = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["query"]["query"])
            assert found, variable
            queries.append(found.group(1))
    return queries


def test_the_alerts_are_the_documented_ones() -> None:
    rules = alert_rules()
    assert {rule["alert"] for rule in rules} == ALERT_NAMES
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule
        anchor = rule["annotations"]["runbook"].split("#", 1)[1]
        assert anchor == rule["alert"].lower(), rule
    monitoring = (ROOT / "docs" / "monitoring.md").read_text()
    for name in ALERT_NAMES:
        assert re.search(rf"^#+ .*\b{name}\b", monitoring, re.MULTILINE), (
            f"docs/monitoring.md has no heading {name}"
        )


def test_promtool_accepts_the_alert_rules() -> None:
    checked = run(tool("promtool"), "check", "rules", ALERTS)
    assert checked.returncode == 0 and "SUCCESS: 5 rules found" in checked.stdout, (
        checked.stdout + checked.stderr
    )


def test_promtool_accepts_the_scrape_configuration(tmp_path: Path) -> None:
    """As shipped, with only the token file's path moved here (promtool opens it)."""
    config = load_yaml(SCRAPE_CONFIG)
    token = tmp_path / "token"
    token.write_text(METRICS_TOKEN)
    (job,) = config["scrape_configs"]
    assert job["job_name"] == "queuelog" and job["metrics_path"] == "/metrics"
    assert job["authorization"]["type"] == "Bearer"
    job["authorization"]["credentials_file"] = str(token)
    config["rule_files"] = [str(ALERTS)]
    checked = run(tool("promtool"), "check", "config", dump_yaml(config, tmp_path / "prometheus.yml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


# Series for `promtool test rules` (one sample a minute), and the alerts they must raise.
UNIT_TESTS: list[dict[str, Any]] = [
    {  # a type whose lag stays over 5 minutes; another under
        "input_series": [
            {"series": 'queuelog_type_oldest_pending_seconds{type="email"}', "values": "0 400x20"},
            {"series": 'queuelog_type_oldest_pending_seconds{type="report"}', "values": "100x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "5m", "alertname": "QueuelogQueueLagHigh", "exp_alerts": []},
            {"eval_time": "10m", "alertname": "QueuelogQueueLagHigh", "exp_alerts": [{"type": "email"}]},
        ],
    },
    {  # email: a claimed counter that stopped; noop: never claimed; report: claimed;
        # resize: claims held back by a limit; unused: nothing due
        "input_series": [
            {"series": f'queuelog_type_oldest_pending_seconds{{type="{t}"}}', "values": "600x30"}
            for t in ("email", "noop", "report", "resize")
        ]
        + [
            {"series": 'queuelog_type_oldest_pending_seconds{type="unused"}', "values": "0x30"},
            {"series": 'queuelog_jobs_claimed_total{type="email"}', "values": "3x30"},
            {"series": 'queuelog_jobs_claimed_total{type="report"}', "values": "0+5x30"},
            {"series": 'queuelog_claims_held_back_total{type="resize"}', "values": "0+1x30"},
        ],
        "alert_rule_test": [
            {"eval_time": "3m", "alertname": "QueuelogNoWorkerClaiming", "exp_alerts": []},
            {
                "eval_time": "20m",
                "alertname": "QueuelogNoWorkerClaiming",
                "exp_alerts": [{"type": "email"}, {"type": "noop"}],
            },
        ],
    },
    {  # email: half fail (failures on one server, completions on another); report: every one
        # fails and none ever completed; noop: 1%; resize: all fail, but only 3 in 15 minutes
        "input_series": [
            {"series": 'queuelog_jobs_failed_total{type="email", instance="a"}', "values": "0+1x30"},
            {"series": 'queuelog_jobs_completed_total{type="email", instance="b"}', "values": "0+1x30"},
            {"series": 'queuelog_jobs_failed_total{type="report", instance="a"}', "values": "0+1x30"},
            {"series": 'queuelog_jobs_failed_total{type="noop", instance="a"}', "values": "0+1x30"},
            {"series": 'queuelog_jobs_completed_total{type="noop", instance="a"}', "values": "0+100x30"},
            {"series": 'queuelog_jobs_failed_total{type="resize", instance="a"}', "values": "0+0.2x30"},
        ],
        "alert_rule_test": [
            {
                "eval_time": "20m",
                "alertname": "QueuelogFailureRateHigh",
                "exp_alerts": [{"type": "email"}, {"type": "report"}],
            },
        ],
    },
    {
        "input_series": [
            {"series": 'queuelog_database_up{job="queuelog", instance="a"}', "values": "1 1 0x10"},
            {"series": 'queuelog_database_up{job="queuelog", instance="b"}', "values": "1x12"},
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "QueuelogDatabaseUnavailable", "exp_alerts": []},
            {
                "eval_time": "8m",
                "alertname": "QueuelogDatabaseUnavailable",
                "exp_alerts": [{"job": "queuelog", "instance": "a"}],
            },
        ],
    },
    {
        "input_series": [
            {"series": 'up{job="queuelog", instance="a"}', "values": "0x10"},
            {"series": 'up{job="queuelog", instance="b"}', "values": "1x10"},
            {"series": 'up{job="other", instance="c"}', "values": "0x10"},
        ],
        "alert_rule_test": [
            {
                "eval_time": "5m",
                "alertname": "QueuelogDown",
                "exp_alerts": [{"job": "queuelog", "instance": "a"}],
            },
        ],
    },
]


def test_each_alert_fires_when_it_should_and_only_then(tmp_path: Path) -> None:
    """On a copy without annotations (their wording is not what this checks; `promtool check
    rules` has parsed their templates): each alert's labels at each time."""
    rules = load_yaml(ALERTS)
    severity = {}
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations")
            severity[rule["alert"]] = rule["labels"]["severity"]
    bare = dump_yaml(rules, tmp_path / "alerts.yml")
    tests = []
    for case in UNIT_TESTS:
        for check in case["alert_rule_test"]:
            check["exp_alerts"] = [
                {"exp_labels": {**labels, "severity": severity[check["alertname"]]}}
                for labels in check["exp_alerts"]
            ]
        tests.append({"interval": "1m", **case})
    assert {c["alertname"] for case in UNIT_TESTS for c in case["alert_rule_test"]} == ALERT_NAMES
    unit = dump_yaml(
        {"rule_files": [str(bare)], "evaluation_interval": "1m", "tests": tests}, tmp_path / "t.yml"
    )
    tested = run(tool("promtool"), "test", "rules", unit)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_the_dashboard_has_grafanas_structure() -> None:
    board = dashboard()
    assert board["uid"] == "queuelog" and board["title"] and isinstance(board["schemaVersion"], int)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert variables["job"]["type"] == "query"
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    assert variables["job"]["datasource"] == datasource
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), ids
    drawn = [p for p in board["panels"] if p["type"] != "row"]
    assert len(drawn) >= 10
    cells: set[tuple[int, int]] = set()
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"} and all(isinstance(v, int) and v >= 0 for v in grid.values())
        assert grid["w"] >= 1 and grid["h"] >= 1 and grid["x"] + grid["w"] <= 24, panel["title"]
        taken = {(grid["x"] + dx, grid["y"] + dy) for dx in range(grid["w"]) for dy in range(grid["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        cells |= taken
    for panel in drawn:
        assert panel["type"] in {"timeseries", "stat", "gauge", "table", "bargauge"}, panel["type"]
        assert panel["title"] and panel["description"], panel
        assert panel["datasource"] == datasource, panel["title"]
        assert panel["targets"], panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == datasource and target["expr"].strip(), panel["title"]
            assert 'job="$job"' in target["expr"], (panel["title"], target["expr"])


# --- against a real server (and a real Prometheus) ------------------------------------------------

ENQUEUE = """mutation($type: String!, $retries: Int) {
  enqueueJob(input: {type: $type, maxRetries: $retries}) { job { id } } }"""
CLAIM = """mutation($types: [String!]) { claimJobs(limit: 10, types: $types) { id attempt } }"""
COMPLETE = """mutation($id: ID!) { completeJob(id: $id) { id } }"""
FAIL = """mutation($id: ID!) { failJob(id: $id, error: "boom") { id status } }"""
LIMIT = """mutation { setTypeControl(input: {type: "report", maxRunning: 1}) { type } }"""


@pytest.fixture(scope="module")
def busy(backend: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server (with a metrics token) that has enqueued, claimed, completed, failed, retried
    and held back jobs: every series the alerts and panels read has samples."""
    with serving(backend, tmp_path_factory, env={"QUEUELOG_METRICS_TOKEN": METRICS_TOKEN}) as server:
        worker = server.make_key("monitoring-worker", "WORKER")
        server.gql(LIMIT).ok()
        for job_type, retries in (("email", 0), ("email", 1), ("email", 0), ("report", 0), ("report", 0)):
            server.gql(ENQUEUE, {"type": job_type, "retries": retries}).ok()
        claimed = server.gql(CLAIM, {"types": ["email"]}, key=worker).ok()["claimJobs"]
        assert len(claimed) == 3
        server.gql(COMPLETE, {"id": claimed[0]["id"]}, key=worker).ok()
        statuses = {
            server.gql(FAIL, {"id": job["id"]}, key=worker).ok()["failJob"]["status"] for job in claimed[1:]
        }
        assert statuses == {"FAILED", "PENDING"}  # failed for good, and retried
        assert len(server.gql(CLAIM, {"types": ["report"]}, key=worker).ok()["claimJobs"]) == 1
        assert server.gql(CLAIM, {"types": ["report"]}, key=worker).ok()["claimJobs"] == []  # held back
        yield server


def scraped_labels(server: Server) -> dict[str, set[str]]:
    """Each sample name of a scrape -> the label names its samples carry."""
    response = httpx.get(
        f"{server.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
    )
    assert response.status_code == 200, response.text[:300]
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def test_every_metric_the_alerts_and_dashboard_read_is_in_a_real_scrape(busy: Server) -> None:
    scraped = scraped_labels(busy)
    scraped["up"] = set()  # Prometheus's own, for each target
    expressions = [rule["expr"] for rule in alert_rules()] + dashboard_queries(dashboard())
    assert len(expressions) > 20
    read: set[str] = set()
    for expr in expressions:
        metrics, grouping = read_by(expr)
        assert metrics, expr
        for name, labels in metrics.items():
            assert name in scraped, f"{name} (in {expr!r}) is not in /metrics"
            assert labels <= scraped[name] | TARGET_LABELS, (name, labels - scraped[name], expr)
            read.add(name)
        carried = set().union(*(scraped[name] for name in metrics)) | TARGET_LABELS
        if any(name.endswith("_bucket") for name in metrics):
            carried.add("le")
        assert grouping <= carried, (grouping - carried, expr)
    # What "is the queue backed up?" rests on is read by both.
    assert {
        "queuelog_type_oldest_pending_seconds",
        "queuelog_database_up",
        "queuelog_jobs_claimed_total",
    } <= read


def prometheus_config(server: Server, tmp_path: Path) -> Path:
    """deploy/prometheus/prometheus.yml, scraping `server` every second with the token from a file."""
    config = load_yaml(SCRAPE_CONFIG)
    token = tmp_path / "token"
    token.write_text(METRICS_TOKEN)
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str(ALERTS)]
    (job,) = config["scrape_configs"]
    job["authorization"]["credentials_file"] = str(token)
    job["static_configs"] = [{"targets": [server.url.removeprefix("http://")]}]
    return dump_yaml(config, tmp_path / "prometheus.yml")


def query(api: str, expr: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{api}/api/v1/query", params={"query": expr}, timeout=30)
    if response.status_code == 503:
        raise ValueError("Prometheus is starting")
    answer = response.json()
    assert answer["status"] == "success", (expr, answer)
    result: list[dict[str, Any]] = answer["data"]["result"]
    return result


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # what it reads is the same on both
def test_prometheus_scrapes_a_server_with_the_token_and_runs_every_expression(
    busy: Server, tmp_path: Path
) -> None:
    binary = tool("prometheus")
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={prometheus_config(busy, tmp_path)}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    api = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        scraped: list[dict[str, Any]] = []
        while not scraped and time.monotonic() < deadline:
            assert process.poll() is None, (tmp_path / "prometheus.log").read_text()
            with contextlib.suppress(httpx.HTTPError, ValueError):  # not listening, or starting (503)
                scraped = query(api, 'queuelog_database_up{job="queuelog"}')
            time.sleep(0.2)
        assert scraped, (tmp_path / "prometheus.log").read_text()[-3000:]
        assert scraped[0]["value"][1] == "1"
        assert query(api, 'up{job="queuelog"}')[0]["value"][1] == "1"
        pending = query(api, 'queuelog_type_jobs{job="queuelog", type="report", status="pending"}')
        assert pending[0]["value"][1] == "1"
        for expr in [rule["expr"] for rule in alert_rules()] + dashboard_queries(dashboard()):
            query(api, expr.replace("$job", "queuelog").replace("$__rate_interval", "1m"))
    finally:
        process.terminate()
        process.wait(30)
        log.close()
