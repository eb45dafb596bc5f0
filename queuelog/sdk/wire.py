"""What goes over the wire, whatever carries it: JSON bodies, the endpoint's URL, and a
GraphQL answer turned into its `data` or the contract error it carries."""

from __future__ import annotations

import json
from typing import Any

try:  # faster parsing of responses (a claim of 100 jobs is ~20 kB); the json module otherwise
    import orjson
except ImportError:  # pragma: no cover - depends on what is installed
    orjson = None  # type: ignore[assignment]

from queuelog.errors import (
    BadInput,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QueuelogError,
    Unauthenticated,
)

PAGE_SIZE = 100  # jobs a page of `jobs` asks for


class ServerError(QueuelogError):
    code = "INTERNAL_SERVER_ERROR"


class ServerUnreachable(QueuelogError):
    """The request did not get an answer (connection refused, timeout, bad gateway...)."""

    code = "UNREACHABLE"


ERRORS_BY_CODE: dict[str, type[QueuelogError]] = {
    cls.code: cls
    for cls in (Unauthenticated, Forbidden, BadInput, PayloadTooLarge, NotFound, Conflict, ServerError)
}


def graphql_url(url: str) -> str:
    """Accept the server's base URL or its /graphql endpoint."""
    url = url.rstrip("/")
    return url if url.endswith("/graphql") else url + "/graphql"


def encode_json(value: Any) -> bytes:
    """A request body as httpx's `json=` would send it: compact UTF-8, NaN and Infinity refused."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def decode_json(content: bytes) -> Any:
    """Parse a response body (ValueError when it is not JSON)."""
    if orjson is not None:
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            pass  # an integer wider than 64 bits, say, which the json module reads
    return json.loads(content)


def _first_message(content: bytes) -> str:
    try:
        return str(decode_json(content)["errors"][0]["message"])
    except (ValueError, KeyError, IndexError, TypeError):
        return "service unavailable"


class Data(dict[str, Any]):
    """What `execute` returns: the operation's `data`, a plain dict in every way, plus
    `refused`, the paths of the `error` fields the server withheld from this key (answered
    null, with a field-level FORBIDDEN): `("job.error",)`, `("jobs.nodes.0.error",
    "job.attempts.1.error")`; empty when nothing was withheld (always, for an ADMIN key).

    The rule (docs/python.md, "What execute raises"): any GraphQL error raises, except those
    field-level refusals of `Job.error` and `JobAttempt.error`, which are here instead."""

    __slots__ = ("refused",)

    def __init__(self, data: dict[str, Any] | None = None, refused: tuple[str, ...] = ()) -> None:
        super().__init__(data or {})
        self.refused = refused

    def __reduce__(self) -> tuple[Any, ...]:
        return (Data, (dict(self), self.refused))


def _withheld_error_field(error: dict[str, Any]) -> str | None:
    """The dotted path of a field-level FORBIDDEN on an `error` field (Job.error, an
    attempt's error: ADMIN only, null for other keys), else None."""
    path = error.get("path") or []
    code = (error.get("extensions") or {}).get("code")
    if code == "FORBIDDEN" and len(path) >= 2 and path[-1] == "error":
        return ".".join(str(part) for part in path)
    return None


def raise_for_errors(errors: list[dict[str, Any]]) -> tuple[str, ...]:
    """Raise the first error but the withheld `error` fields; return the paths of those."""
    withheld: list[str] = []
    for error in errors:
        path = _withheld_error_field(error)
        if path is not None:
            withheld.append(path)
            continue
        code = (error.get("extensions") or {}).get("code", "INTERNAL_SERVER_ERROR")
        raise ERRORS_BY_CODE.get(code, ServerError)(error.get("message", "unknown error"))
    return tuple(withheld)


def answer_data(status: int, content: bytes, url: str) -> Data:
    """The `data` of an HTTP answer from `url`, or the error it stands for: a 5xx or an answer
    that is not GraphQL is ServerUnreachable (503: the server is up, its database is not)."""
    if status >= 500 and status != 503:
        raise ServerUnreachable(f"HTTP {status} from {url}")
    if status == 503:
        raise ServerUnreachable(f"HTTP 503 from {url}: {_first_message(content)}")
    try:
        answer = decode_json(content)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ServerUnreachable(f"HTTP {status}: not a GraphQL response")
    refused = raise_for_errors(answer.get("errors") or [])
    if status == 413:
        raise PayloadTooLarge("request body too large")
    return Data(answer.get("data"), refused)
