"""The files under deploy/ (docs/deployment.md), checked by the tools that will read them.

- The systemd units pass `systemd-analyze verify`, and their ExecStart lines, run as written
  with the example environment files, are the deployment: `queuelog migrate` and an ADMIN key
  first, then two replicas on one PostgreSQL database, then workers.
- nginx runs deploy/nginx/queuelog.conf for real, terminating TLS (a self-signed certificate
  made here) in front of those two replicas: GraphQL over https, a subscription over wss, the
  Host check (QUEUELOG_ALLOWED_HOSTS), a long-polling claim, queuelog's own 413.
- deploy/compose.yaml passes `docker compose config` (or `docker-compose config`) and holds
  what it must (health checks, start order, two servers, no secret written in it);
  deploy/Caddyfile passes `caddy validate`; deploy/Dockerfile runs as a user, checks
  /healthz without curl, and passes only flags the CLI has (its health check is run here).

A test whose tool is missing skips and says which package brings it, or fails when
QUEUELOG_TEST_REQUIRE_DEPLOY_TOOLS=1 (CI).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from queuelog.keys import create_key
from queuelog.model import Role
from queuelog.storage.engine import create_sync_engine
from tests.conftest import STARTUP_TIMEOUT, Databases, free_port, require_backend

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
SYSTEMD = DEPLOY / "systemd"
SERVER_UNIT = SYSTEMD / "queuelog@.service"
WORKER_UNIT = SYSTEMD / "queuelog-worker@.service"
NGINX_CONF = DEPLOY / "nginx" / "queuelog.conf"
REQUIRE_TOOLS = os.environ.get("QUEUELOG_TEST_REQUIRE_DEPLOY_TOOLS") == "1"
INSTALLED_QUEUELOG = "/opt/queuelog/.venv/bin/queuelog"  # where docs/deployment.md installs it
QUEUELOG = str(Path(sys.executable).parent / "queuelog")
PUBLIC_HOST = "queue.example.com"
# Which package brings each tool, for the skip message.
PACKAGES = {
    "systemd-analyze": "systemd",
    "nginx": "nginx",
    "openssl": "openssl",
    "caddy": "caddy",
    "docker-compose": "docker-compose",
}


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        reason = f"{name} is not installed (apt-get install {PACKAGES.get(name, name)})"
        if REQUIRE_TOOLS:
            pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_DEPLOY_TOOLS=1")
        pytest.skip(reason)
    return path


def load_yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError:
        reason = "PyYAML is not installed (pip install pyyaml)"
        if REQUIRE_TOOLS:
            pytest.fail(reason + " and QUEUELOG_TEST_REQUIRE_DEPLOY_TOOLS=1")
        pytest.skip(reason)
    return yaml.safe_load(path.read_text())


# --- systemd ----------------------------------------------------------------------------------


def unit_entries(path: Path) -> dict[str, list[str]]:
    """`Section.Key` -> its values in order (systemd units repeat keys such as EnvironmentFile)."""
    entries: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        entries.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return entries


def read_env_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile as systemd reads ours: KEY=VALUE lines and comments (no quoting used)."""
    values: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Z_][A-Z0-9_]*", key), f"{path.name}: {raw!r}"
        assert not value.startswith(("'", '"')), f"{path.name}: quoting is not needed here: {raw!r}"
        values[key] = value
    return values


def exec_start(unit: Path, instance: str, env: dict[str, str]) -> list[str]:
    """The unit's ExecStart as systemd runs it: %i and ${VAR} expanded, and the queuelog
    that docs/deployment.md installs in /opt replaced by this venv's."""
    (line,) = unit_entries(unit)["Service.ExecStart"]
    words = shlex.split(line.replace("%i", instance))
    expanded = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word) for word in words]
    assert expanded[0] == INSTALLED_QUEUELOG, expanded
    return [QUEUELOG, *expanded[1:]]


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    instances = []
    for unit, instance in (
        (SERVER_UNIT, "queuelog@8001.service"),
        (WORKER_UNIT, "queuelog-worker@w1.service"),
    ):
        # Only ExecStart's path changes: verify wants the program to exist.
        text = unit.read_text()
        assert text.count(INSTALLED_QUEUELOG) == 1, unit.name
        (tmp_path / instance).write_text(text.replace(INSTALLED_QUEUELOG, QUEUELOG))
        instances.append(str(tmp_path / instance))
    done = subprocess.run(
        [analyze, "verify", "--man=no", *instances], capture_output=True, text=True, timeout=60
    )
    # verify exits 0 for unknown keys and unparseable values too, only saying so: any output fails.
    assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), done.stdout + done.stderr


def test_units_are_hardened_and_restart_sensibly() -> None:
    for unit in (SERVER_UNIT, WORKER_UNIT):
        entries = unit_entries(unit)
        service = {k.removeprefix("Service."): v[-1] for k, v in entries.items() if k.startswith("Service.")}
        assert service["DynamicUser"] == "yes" and service["User"] not in ("root", "0"), unit.name
        assert service["ProtectSystem"] == "strict" and service["ProtectHome"] == "yes", unit.name
        assert service["NoNewPrivileges"] == "yes", unit.name
        assert service["CapabilityBoundingSet"] == "", unit.name
        assert service["Restart"] == "on-failure", unit.name
        assert "Unit.StartLimitBurst" in entries, f"{unit.name}: a broken configuration restarts forever"
        assert "--key" not in service["ExecStart"], f"{unit.name}: a key in ExecStart shows in ps"
    worker = unit_entries(WORKER_UNIT)
    words = shlex.split(worker["Service.ExecStart"][0])
    grace = float(words[words.index("--grace") + 1])
    assert float(worker["Service.TimeoutStopSec"][0]) > grace, "systemd would kill handlers still in grace"
    assert worker["Service.EnvironmentFile"][-1] == "/etc/queuelog/workers/%i.env"
    assert worker["Service.RestartPreventExitStatus"], "a refused key would restart forever"


# --- a deployment as docs/deployment.md builds it ------------------------------------------------


@dataclass
class Deployment:
    admin_key: str
    worker_key: str
    replicas: list[int]
    env: dict[str, str]
    logs: list[Path]


def wait_healthy(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"server did not start:\n{log.read_text()}")
        time.sleep(0.05)


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """PostgreSQL, the first keys, then two replicas started by the server unit's ExecStart
    with the example environment file (only the database URL is this test's)."""
    require_backend("postgresql")
    databases = Databases("postgresql", tmp_path_factory)
    tmp = tmp_path_factory.mktemp("deployment")
    settings = read_env_file(SYSTEMD / "queuelog.env.example")
    # At the current schema already (a copy of the session's template, as `queuelog migrate`
    # leaves it), and the keys made before any replica starts, as docs/deployment.md does
    # with `queuelog keys create` (tests/cli/test_cli.py runs those commands).
    settings["QUEUELOG_DATABASE_URL"] = databases.fresh()
    base = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env = {**base, **settings}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        engine = create_sync_engine(settings["QUEUELOG_DATABASE_URL"])
        try:
            _, admin_key = create_key(engine, "ops", [Role.ADMIN])
            _, worker_key = create_key(engine, "worker-1", [Role.WORKER])
        finally:
            engine.dispose()
        replicas = [free_port(), free_port()]
        logs = []
        for port in replicas:
            log = tmp / f"server-{port}.log"
            with log.open("wb") as out:
                processes.append(
                    subprocess.Popen(
                        exec_start(SERVER_UNIT, str(port), env),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        cwd=tmp,
                        start_new_session=True,
                    )
                )
            logs.append(log)
        for port, process, log in zip(replicas, processes, logs, strict=True):
            wait_healthy(port, process, log)
        yield Deployment(admin_key, worker_key, replicas, env, logs)
    finally:
        for process in processes:
            stop(process)
        databases.drop_all()


def test_replicas_started_after_the_admin_key_print_no_bootstrap_key(deployment: Deployment) -> None:
    for log in deployment.logs:
        text = log.read_text()
        assert "queuelog serving" in text and "ql_" not in text, text


def test_the_host_check_of_the_example_settings(deployment: Deployment) -> None:
    port = deployment.replicas[0]
    for host, status in ((PUBLIC_HOST, 200), ("127.0.0.1", 200), ("rebound.example.net", 400)):
        response = httpx.get(f"http://127.0.0.1:{port}/healthz", headers={"Host": host}, timeout=10)
        assert response.status_code == status, (host, response.text)


def run_worker(deployment: Deployment, url: str, key: str) -> subprocess.CompletedProcess[str]:
    shared = read_env_file(SYSTEMD / "worker.env.example")
    shared["WORKER_URL"] = url
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(shared)
    env["QUEUELOG_API_KEY"] = key  # what /etc/queuelog/workers/NAME.env holds
    return subprocess.run(
        exec_start(WORKER_UNIT, "worker-1", env),
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO / "examples",  # WorkingDirectory: where the handlers module is
        timeout=60,
    )


def test_a_refused_key_ends_the_worker_with_a_status_systemd_does_not_restart(
    deployment: Deployment,
) -> None:
    (statuses,) = unit_entries(WORKER_UNIT)["Service.RestartPreventExitStatus"]
    url = f"http://127.0.0.1:{deployment.replicas[0]}"
    done = run_worker(deployment, url, "ql_" + "x" * 40)
    assert str(done.returncode) in statuses.split(), (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    admin = run_worker(deployment, url, deployment.admin_key)  # a key without the WORKER role
    assert str(admin.returncode) in statuses.split(), (admin.returncode, admin.stderr)


# --- nginx in front, for real ------------------------------------------------------------------


@dataclass
class Proxy:
    https_port: int
    http_port: int
    context: ssl.SSLContext

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"https://127.0.0.1:{self.https_port}",
            verify=self.context,
            headers={"Host": PUBLIC_HOST},
            timeout=30,
        )


def substitute(text: str, old: str, new: str, count: int) -> str:
    """Replace `old`, which must occur `count` times (else deploy/nginx/queuelog.conf changed
    in a way this test must follow)."""
    assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in {NGINX_CONF.name}"
    return text.replace(old, new)


def nginx_config(tmp: Path, replicas: list[int], https_port: int, http_port: int) -> Path:
    """deploy/nginx/queuelog.conf with this test's ports and certificate, in an nginx.conf
    whose files are all under `tmp`."""
    conf = NGINX_CONF.read_text()
    conf = substitute(conf, "server 127.0.0.1:8001;", f"server 127.0.0.1:{replicas[0]};", 1)
    conf = substitute(conf, "server 127.0.0.1:8002;", f"server 127.0.0.1:{replicas[1]};", 1)
    conf = substitute(conf, "listen 80;", f"listen 127.0.0.1:{http_port};", 1)
    conf = substitute(conf, "listen 443 ssl;", f"listen 127.0.0.1:{https_port} ssl;", 1)
    conf = substitute(conf, "listen [::]:80;\n", "", 1)  # IPv6 may be off on a test machine
    conf = substitute(conf, "listen [::]:443 ssl;\n", "", 1)
    conf = substitute(conf, f"/etc/letsencrypt/live/{PUBLIC_HOST}/fullchain.pem", str(tmp / "cert.pem"), 1)
    conf = substitute(conf, f"/etc/letsencrypt/live/{PUBLIC_HOST}/privkey.pem", str(tmp / "key.pem"), 1)
    (tmp / "queuelog.conf").write_text(conf)
    temp_paths = "\n".join(f"    {kind}_temp_path {tmp / kind};" for kind in ("client_body", "proxy"))
    main = tmp / "nginx.conf"
    main.write_text(
        f"""user root;
worker_processes 1;
daemon off;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"};
events {{ worker_connections 128; }}
http {{
    access_log {tmp / "access.log"};
{temp_paths}
    fastcgi_temp_path {tmp / "fastcgi"};
    uwsgi_temp_path {tmp / "uwsgi"};
    scgi_temp_path {tmp / "scgi"};
    include {tmp / "queuelog.conf"};
}}
"""
    )
    return main


def self_signed_certificate(tmp: Path) -> ssl.SSLContext:
    subprocess.run(
        [
            tool("openssl"),
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            f"/CN={PUBLIC_HOST}",
            "-addext",
            f"subjectAltName=DNS:{PUBLIC_HOST},IP:127.0.0.1",
            "-keyout",
            str(tmp / "key.pem"),
            "-out",
            str(tmp / "cert.pem"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return ssl.create_default_context(cafile=str(tmp / "cert.pem"))


def nginx_command(nginx: str, tmp: Path, main: Path) -> list[str]:
    return [nginx, "-p", str(tmp), "-e", str(tmp / "error.log"), "-c", str(main)]


def test_nginx_accepts_the_config(tmp_path: Path) -> None:
    nginx = tool("nginx")
    self_signed_certificate(tmp_path)
    main = nginx_config(tmp_path, [free_port(), free_port()], free_port(), free_port())
    done = subprocess.run([*nginx_command(nginx, tmp_path, main), "-t"], capture_output=True, text=True)
    assert done.returncode == 0 and "test is successful" in done.stderr, done.stderr


def test_nginx_waits_longer_than_a_long_poll() -> None:
    """A claim's waitSeconds is at most 30 (schema.graphql): nginx must not cut it off."""
    conf = NGINX_CONF.read_text()
    for directive in ("proxy_read_timeout", "proxy_send_timeout"):
        (value,) = re.findall(rf"{directive} (\d+)s;", conf)
        assert int(value) >= 60, directive


@pytest.fixture(scope="module")
def proxy(deployment: Deployment, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    nginx = tool("nginx")
    tmp = tmp_path_factory.mktemp("nginx")
    context = self_signed_certificate(tmp)
    https_port, http_port = free_port(), free_port()
    main = nginx_config(tmp, deployment.replicas, https_port, http_port)
    process = subprocess.Popen(
        nginx_command(nginx, tmp, main), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (tmp / "error.log").read_text()
            try:
                with socket.create_connection(("127.0.0.1", https_port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, (tmp / "error.log").read_text()
                time.sleep(0.05)
        yield Proxy(https_port, http_port, context)
    finally:
        stop(process)


def gql(client: httpx.Client, key: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    response = client.post(
        "/graphql",
        json={"query": query, "variables": variables or {}},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert not body.get("errors"), body
    return body["data"]


ENQUEUE = "mutation($type: String!) { enqueueJob(input: {type: $type}) { job { id status } } }"


def test_graphql_over_https_through_nginx(deployment: Deployment, proxy: Proxy) -> None:
    with proxy.client() as client:
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        assert health.http_version == "HTTP/1.1"
        ids = {gql(client, deployment.admin_key, ENQUEUE, {"type": "email"})["enqueueJob"]["job"]["id"]}
        ids.add(gql(client, deployment.admin_key, ENQUEUE, {"type": "email"})["enqueueJob"]["job"]["id"])
        assert len(ids) == 2
        me = gql(client, deployment.admin_key, "{ me { name roles } }")
        assert me == {"me": {"name": "ops", "roles": ["ADMIN"]}}


def test_plain_http_is_redirected_to_https(proxy: Proxy) -> None:
    response = httpx.get(
        f"http://127.0.0.1:{proxy.http_port}/graphql?x=1", headers={"Host": PUBLIC_HOST}, timeout=10
    )
    assert response.status_code == 301
    assert response.headers["location"] == f"https://{PUBLIC_HOST}/graphql?x=1"


def test_nginx_passes_the_host_that_queuelog_checks(proxy: Proxy) -> None:
    with proxy.client() as client:
        refused = client.get("/healthz", headers={"Host": "rebound.example.net"})
    assert refused.status_code == 400, refused.text


def test_queuelog_answers_the_413_behind_nginx(deployment: Deployment, proxy: Proxy) -> None:
    body = b'{"query": "' + b"x" * 1_100_000 + b'"}'
    with proxy.client() as client:
        response = client.post(
            "/graphql",
            content=body,
            headers={"Authorization": f"Bearer {deployment.admin_key}", "Content-Type": "application/json"},
        )
    assert response.status_code == 413
    assert "nginx" not in response.text


def test_a_long_polling_claim_through_nginx(deployment: Deployment, proxy: Proxy) -> None:
    """The only test with "report" jobs: the claim must get the one enqueued here."""
    claim = 'mutation { claimJob(types: ["report"], waitSeconds: 20) { id workerId } }'
    claimed: dict[str, Any] = {}

    def wait_for_a_job() -> None:
        with proxy.client() as client:
            claimed.update(gql(client, deployment.worker_key, claim))

    waiting = threading.Thread(target=wait_for_a_job)
    waiting.start()
    # Give the claim time to be waiting (on whichever replica nginx gave it to) before the job
    # exists; were it not waiting yet, it would find the job at once and pass all the same.
    time.sleep(0.5)
    with proxy.client() as client:
        job = gql(client, deployment.admin_key, ENQUEUE, {"type": "report"})
    waiting.join(timeout=30)
    assert claimed["claimJob"]["id"] == job["enqueueJob"]["job"]["id"], claimed
    assert claimed["claimJob"]["workerId"] == "worker-1"


def test_a_subscription_over_wss_through_nginx(deployment: Deployment, proxy: Proxy) -> None:
    with proxy.client() as client:
        job_id = gql(client, deployment.admin_key, ENQUEUE, {"type": "email"})["enqueueJob"]["job"]["id"]

    async def watch() -> list[str]:
        sock = socket.create_connection(("127.0.0.1", proxy.https_port), timeout=10)
        async with connect(
            f"wss://{PUBLIC_HOST}/graphql",  # the name the certificate is for, sent as SNI and Host
            sock=sock,
            ssl=proxy.context,
            subprotocols=["graphql-transport-ws"],  # type: ignore[list-item]
            proxy=None,
            open_timeout=10,
        ) as ws:
            assert ws.subprotocol == "graphql-transport-ws"
            await ws.send(
                json.dumps(
                    {
                        "type": "connection_init",
                        "payload": {"authorization": f"Bearer {deployment.admin_key}"},
                    }
                )
            )
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "connection_ack"
            query = "subscription($id: ID!) { jobUpdated(id: $id) { id status } }"
            await ws.send(
                json.dumps(
                    {"id": "1", "type": "subscribe", "payload": {"query": query, "variables": {"id": job_id}}}
                )
            )
            statuses: list[str] = []
            cancel = "mutation($id: ID!) { cancelJob(id: $id) { id } }"
            # jobUpdated sends the job as it is first, then each change: cancel it once live.
            while "CANCELLED" not in statuses:
                message = json.loads(await asyncio.wait_for(ws.recv(), 10))
                assert message["type"] == "next", message
                statuses.append(message["payload"]["data"]["jobUpdated"]["status"])
                if len(statuses) == 1:
                    with proxy.client() as client:  # maybe through the other replica
                        await asyncio.to_thread(gql, client, deployment.admin_key, cancel, {"id": job_id})
            return statuses

    statuses = asyncio.run(asyncio.wait_for(watch(), 30))
    assert statuses[0] == "PENDING" and statuses[-1] == "CANCELLED", statuses


# --- Docker: the image, compose, Caddy -----------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    instructions = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def final_stage() -> list[tuple[str, str]]:
    instructions = dockerfile_instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    return instructions[last_from:]


def exec_form(arguments: str) -> list[str]:
    words = json.loads(arguments)
    assert isinstance(words, list) and all(isinstance(w, str) for w in words), arguments
    return words


def healthcheck_command() -> list[str]:
    (arguments,) = [rest for word, rest in final_stage() if word == "HEALTHCHECK"]
    return exec_form(arguments[arguments.index("CMD ") + 4 :])


def help_flags(*command: str) -> set[str]:
    done = subprocess.run([QUEUELOG, *command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return set(re.findall(r"--[a-z][a-z-]*", done.stdout))


def test_the_image_runs_as_a_user_and_checks_healthz_without_curl() -> None:
    stage = final_stage()
    users = [rest for word, rest in stage if word == "USER"]
    assert users and users[-1] not in ("root", "0") and not users[-1].startswith(("root:", "0:")), users
    command = healthcheck_command()
    assert command[0] == "python" and "/healthz" in command[-1], command
    assert not any("curl" in rest or "wget" in rest for _, rest in stage), "the slim image has neither"
    assert exec_form(dict(stage)["ENTRYPOINT"]) == ["queuelog"]


def test_the_image_installs_the_project_and_passes_real_flags() -> None:
    instructions = dockerfile_instructions()
    copied = [
        shlex.split(rest)[:-1] for word, rest in instructions if word == "COPY" and "--from" not in rest
    ]
    sources = [source for sources in copied for source in sources]
    assert {"pyproject.toml", "queuelog"} <= set(sources), sources
    for source in sources:
        assert (REPO / source).exists(), source
    # The build context keeps what COPY takes and (Dockerfile.dockerignore) nothing else.
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and {f"!{s}" for s in sources} <= {line.rstrip("/") for line in ignore}, ignore
    (install,) = [rest for word, rest in instructions if word == "RUN" and "pip install" in rest]
    extras = set(re.findall(r"\[(\w+)\]", install))
    with (REPO / "pyproject.toml").open("rb") as file:
        assert extras <= set(tomllib.load(file)["project"]["optional-dependencies"]), extras
    cmd = exec_form(dict(final_stage())["CMD"])
    assert cmd[0] == "serve" and "0.0.0.0" in cmd, cmd
    assert {w for w in cmd if w.startswith("--")} <= help_flags("serve"), cmd
    assert cmd[cmd.index("--port") + 1] == "8000" and "8000" in healthcheck_command()[-1]


def run_healthcheck(port: int) -> subprocess.CompletedProcess[str]:
    command = healthcheck_command()
    code = command[-1].replace("127.0.0.1:8000", f"127.0.0.1:{port}")
    assert code != command[-1]
    return subprocess.run([sys.executable, *command[1:-1], code], capture_output=True, text=True, timeout=30)


def test_the_image_health_check_run_for_real(deployment: Deployment) -> None:
    assert run_healthcheck(deployment.replicas[0]).returncode == 0
    down = run_healthcheck(free_port())  # nothing listens there
    assert down.returncode == 1 and down.stderr.startswith("unhealthy: ") and "Traceback" not in down.stderr


def compose_file() -> dict[str, Any]:
    compose = load_yaml(DEPLOY / "compose.yaml")
    assert isinstance(compose, dict)
    return compose


def compose_variables() -> set[str]:
    return set(re.findall(r"\$\{(\w+)", (DEPLOY / "compose.yaml").read_text()))


def test_compose_holds_a_two_server_deployment() -> None:
    services = compose_file()["services"]
    assert {"postgres", "migrate", "server-1", "server-2", "worker-1", "proxy"} <= set(services)
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in services["postgres"]
    for name in ("server-1", "server-2"):
        server = services[name]
        assert server["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert server["healthcheck"]["test"] == ["CMD", *healthcheck_command()], "as the image's"
        assert "127.0.0.1" in server["environment"]["QUEUELOG_ALLOWED_HOSTS"].split(","), (
            "the health check's Host"
        )
        assert services["proxy"]["depends_on"][name]["condition"] == "service_healthy"
    worker = services["worker-1"]
    assert worker["healthcheck"] == {"disable": True}
    assert set(worker["environment"]) == {"QUEUELOG_API_KEY"}, "a worker needs no database password"
    assert {w for w in worker["command"] if w.startswith("--")} <= help_flags("worker")
    url = worker["command"][worker["command"].index("--url") + 1]
    assert (
        url.removeprefix("http://").split(":")[0]
        in services["server-1"]["environment"]["QUEUELOG_ALLOWED_HOSTS"]
    )


def test_compose_writes_no_secret_in_itself() -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    assert "ql_" not in text
    for name, service in compose_file()["services"].items():
        for variable, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|KEY|TOKEN|DATABASE_URL", variable):
                assert "${" in str(value), f"{name}: {variable} is written in compose.yaml"
    # Every variable comes from deploy/.env, which git ignores, made from deploy/env.example.
    example = read_env_file(DEPLOY / "env.example")
    assert compose_variables() <= set(example), compose_variables() - set(example)
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()


def compose_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in compose_variables()}
    env.update(read_env_file(DEPLOY / "env.example"))
    env.update(POSTGRES_PASSWORD="0123456789abcdef", QUEUELOG_WORKER_1_KEY="ql_" + "k" * 40)
    env["DOCKER_CONFIG"] = str(tmp_path)  # no client configuration of this machine's
    return env


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker is not None:
        plugin = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if plugin.returncode == 0:
            return [docker, "compose"]
    return [tool("docker-compose")]


def test_compose_config_validates(tmp_path: Path) -> None:
    command = compose_command()
    done = subprocess.run(
        [*command, "-f", str(DEPLOY / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        env=compose_env(tmp_path),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "postgresql://queuelog:0123456789abcdef@postgres:5432/queuelog" in done.stdout
    # Without deploy/.env's password, nothing starts: compose says which file to fill in.
    env = compose_env(tmp_path)
    del env["POSTGRES_PASSWORD"]
    refused = subprocess.run(
        [*command, "-f", str(DEPLOY / "compose.yaml"), "config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode != 0 and "deploy/.env" in refused.stderr, refused.stderr


def test_caddyfile_validates(tmp_path: Path) -> None:
    caddy = tool("caddy")
    env = {**os.environ, "QUEUELOG_PUBLIC_HOST": PUBLIC_HOST, "HOME": str(tmp_path)}
    env.update(XDG_DATA_HOME=str(tmp_path / "data"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    caddyfile = str(DEPLOY / "Caddyfile")
    done = subprocess.run(
        [caddy, "validate", "--config", caddyfile, "--adapter", "caddyfile"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0 and "Valid configuration" in done.stdout + done.stderr, done.stderr
    formatted = subprocess.run([caddy, "fmt", caddyfile], capture_output=True, text=True, env=env, timeout=60)
    assert formatted.stdout == (DEPLOY / "Caddyfile").read_text(), "caddy fmt would change deploy/Caddyfile"
    # Its upstreams are compose's servers, on the port the image serves.
    upstreams = re.findall(r"reverse_proxy ([^{]+)\{", (DEPLOY / "Caddyfile").read_text())[0].split()
    assert upstreams == ["server-1:8000", "server-2:8000"], upstreams
