"""`Client` stays AsyncClient's blocking twin (queuelog/sdk/sync_client.py).

Proven: every call of AsyncClient but the worker's (and `execute`, whose `timeout` only the
async client takes) is a method of Client with the same parameters, defaults, annotations
and docstring, returning what the coroutine returns (`list`, `watch`, `subscribe`: an
iterator for an async iterator; `enqueue`: its job, whose `wait` is the Client's, blocking);
and mypy, strict, reads those signatures on a Client: a call with a wrong
argument is an error, and a call's result has the async method's type.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path

import pytest

from queuelog.client import AsyncClient, Client, EnqueuedJob, Job
from queuelog.sdk.session import Session
from queuelog.sdk.worker_calls import WorkerCalls

REPO = Path(__file__).resolve().parents[2]
ASYNC_ONLY = {"execute", "post_json", "aclose"}


def blocking_calls() -> list[str]:
    """AsyncClient's public calls that Client makes blocking: all but the worker's."""
    worker_calls = set(vars(WorkerCalls))
    return sorted(
        name
        for name, _ in inspect.getmembers(AsyncClient, inspect.isfunction)
        if not name.startswith("_") and name not in worker_calls and name not in ASYNC_ONLY
    )


@pytest.mark.parametrize("name", blocking_calls())
def test_each_call_has_the_async_signature_and_docstring(name: str) -> None:
    blocking = getattr(Client, name)
    coroutine = getattr(AsyncClient, name)
    expected = inspect.signature(coroutine, eval_str=True)
    returns = expected.return_annotation
    if getattr(returns, "__origin__", None) in (AsyncIterator, AsyncGenerator):
        expected = expected.replace(return_annotation=Iterator[returns.__args__[0]])
    if name == "enqueue":
        expected = expected.replace(return_annotation=EnqueuedJob[Job])
    assert inspect.signature(blocking, eval_str=True) == expected
    assert blocking.__doc__ == coroutine.__doc__
    assert blocking.__name__ == coroutine.__name__  # `cancel` is `cancel_job`, on both


def test_client_has_nothing_but_the_blocking_calls_and_its_own() -> None:
    own = {"close", "execute"}
    public = {name for name in dir(Client) if not name.startswith("_")}
    assert public == set(blocking_calls()) | own
    assert set(inspect.signature(Client.__init__).parameters) == {"self", "url", "key", "timeout"}
    # The base every call group extends holds no call a user makes.
    assert {n for n in vars(Session) if not n.startswith("_")} == ASYNC_ONLY


def test_mypy_reads_the_async_signatures_on_a_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from mypy import api

    checked = tmp_path / "uses_client.py"
    checked.write_text(
        textwrap.dedent(
            """\
            from queuelog.client import Client, Job

            def use(queue: Client) -> None:
                job: Job = queue.enqueue("email", {"to": "a"}, priority="HIGH", max_retries=2)
                queue.enqueue("email", priority=3)
                queue.enqueue("email", bogus=True)
                for found in queue.list(status="PENDING"):
                    reveal_type(found)
                reveal_type(queue.pause_type)
            """
        )
    )
    monkeypatch.setenv("MYPYPATH", str(REPO))
    out, _, status = api.run(
        ["--strict", "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), str(checked)]
    )
    found = [line.removeprefix(f"{checked}:") for line in out.splitlines() if line.startswith(str(checked))]
    assert found == [
        '5: error: Argument "priority" has incompatible type "int"; expected "str"  [arg-type]',
        '6: error: Unexpected keyword argument "bogus"  [call-arg]',
        '8: note: Revealed type is "queuelog.sdk.types.Job"',
        '9: note: Revealed type is "def (type: str, until: datetime.datetime | str | None =)'
        ' -> queuelog.sdk.types.TypeControl"',
    ], out
    assert status == 1
