"""The SDK's documented names import from where the docs say, with the signatures they had.

Every name docs/python.md, docs/testing.md and the README import or name, from
`queuelog.client`, `queuelog.worker`, `queuelog.errors` and `queuelog.testing` (and the short
forms `from queuelog import Client, AsyncClient, Worker`), is imported here; its signature,
and each public method's, is compared with tests/sdk/public_api.json, written from the code as it
stood before the SDK became a package. Annotations are compared evaluated, with queuelog's
module paths left out, so a class that moves keeps its signature.

Regenerate after a deliberate change: `python tests/sdk/test_public_api.py --write`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import sys
import typing
from pathlib import Path
from typing import Any

SIGNATURES = Path(__file__).with_name("public_api.json")

DOCUMENTED: dict[str, tuple[str, ...]] = {
    "queuelog.client": (
        "Client",
        "AsyncClient",
        "Job",
        "Enqueued",
        "EnqueuedJob",
        "JobWaiter",
        "Completed",
        "QueueStats",
        "TypeControl",
        "RateLimit",
        "Schedule",
        "EnqueueItem",
        "MissingKey",
        "ServerError",
        "ServerUnreachable",
        "UNCHANGED",
        "Unchanged",
    ),
    "queuelog.worker": ("Worker", "Retry", "Discard", "Snooze", "JobCancelled", "KeyRefused", "JobContext"),
    "queuelog.errors": (
        "QueuelogError",
        "Unauthenticated",
        "Forbidden",
        "BadInput",
        "PayloadTooLarge",
        "NotFound",
        "Conflict",
        "DatabaseUnavailable",
    ),
    "queuelog.testing": ("LocalQueue",),
}
# Worker attributes the docs name that are set by the constructor, not methods.
WORKER_COUNTERS = ("active", "max_active_seen", "processed")


def _annotation(value: Any) -> str:
    text = value if isinstance(value, str) else inspect.formatannotation(value)
    text = re.sub(r"\bqueuelog(\.\w+)*\.(?=[A-Z_a-z])", "", text)
    return text.replace("typing.", "").replace("collections.abc.", "")


def _signature(function: Any) -> str:
    signature = inspect.signature(function, eval_str=True)
    parameters = [
        p.replace(annotation=_annotation(p.annotation)) if p.annotation is not p.empty else p
        for p in signature.parameters.values()
    ]
    returns = signature.return_annotation
    signature = signature.replace(
        parameters=parameters,
        return_annotation=_annotation(returns) if returns is not signature.empty else returns,
    )
    return str(signature).replace("'", "")


def _public_methods(cls: type) -> dict[str, str]:
    found = {}
    for name in dir(cls):
        if name.startswith("_") and name not in (
            "__init__",
            "__enter__",
            "__exit__",
            "__aenter__",
            "__aexit__",
        ):
            continue
        value = inspect.getattr_static(cls, name)
        if isinstance(value, property) and name in WORKER_COUNTERS:
            continue  # attributes where the docs name them; test_the_worker_has_the_counters_...
        if isinstance(value, property):
            found[name] = "property -> " + _annotation(
                inspect.signature(value.fget, eval_str=True).return_annotation
            )
        elif isinstance(value, staticmethod | classmethod):
            found[name] = _signature(getattr(cls, name))
        elif (
            inspect.isfunction(value)
            or callable(getattr(value, "__get__", None))
            and callable(getattr(cls, name))
        ):
            if name in vars(object) and getattr(cls, name) is getattr(object, name, None):
                continue
            if inspect.isclass(getattr(cls, name)):
                continue
            found[name] = _signature(getattr(cls, name))
    return found


def describe(value: Any) -> dict[str, Any]:
    """What a caller depends on of one documented name."""
    if inspect.isclass(value) and typing.is_typeddict(value):
        hints = typing.get_type_hints(value, include_extras=True)
        return {"kind": "TypedDict", "keys": {k: _annotation(v) for k, v in sorted(hints.items())}}
    if inspect.isclass(value) and issubclass(value, BaseException):
        return {
            "kind": "exception",
            "bases": [b.__name__ for b in value.__mro__[1:] if b is not object],
            "code": getattr(value, "code", None),
            "init": _signature(value.__init__) if "__init__" in vars(value) else None,
        }
    if inspect.isclass(value):
        described: dict[str, Any] = {"kind": "class", "methods": _public_methods(value)}
        if dataclasses.is_dataclass(value):
            hints = typing.get_type_hints(value)
            described["fields"] = [
                f"{f.name}: {_annotation(hints[f.name])}"
                + ("" if f.default is dataclasses.MISSING else f" = {f.default!r}")
                for f in dataclasses.fields(value)
            ]
            described["frozen"] = value.__dataclass_params__.frozen  # type: ignore[attr-defined]
        return described
    return {"kind": "value", "repr": repr(value)}


def current() -> dict[str, dict[str, Any]]:
    return {
        module: {name: describe(getattr(importlib.import_module(module), name)) for name in names}
        for module, names in DOCUMENTED.items()
    }


def test_every_documented_name_keeps_its_signature() -> None:
    expected = json.loads(SIGNATURES.read_text())
    found = current()
    for module, names in expected.items():
        for name, described in names.items():
            assert found[module][name] == described, f"{module}.{name}"
    assert found == expected


def test_the_short_forms_import_the_same_classes() -> None:
    from queuelog import AsyncClient, Client, Worker
    from queuelog.client import AsyncClient as DocumentedAsyncClient
    from queuelog.client import Client as DocumentedClient
    from queuelog.worker import Worker as DocumentedWorker

    assert (Client, AsyncClient, Worker) == (DocumentedClient, DocumentedAsyncClient, DocumentedWorker)


def test_the_worker_has_the_counters_the_docs_name() -> None:
    from queuelog.client import AsyncClient
    from queuelog.worker import Worker

    worker = Worker(
        "http://127.0.0.1:1", "k", {"email": lambda job: None}, client=AsyncClient("http://127.0.0.1:1", "k")
    )
    assert {name: getattr(worker, name) for name in WORKER_COUNTERS} == dict.fromkeys(WORKER_COUNTERS, 0)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    SIGNATURES.write_text(json.dumps(current(), indent=1, sort_keys=True) + "\n")
