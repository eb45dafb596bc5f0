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


def _is_hidden_error_field(error: dict[str, Any]) -> bool:
    """Non-admin keys get null plus FORBIDDEN for `Job.error`; that is not a failure."""
    path = error.get("path") or []
    code = (error.get("extensions") or {}).get("code")
    return bool(path) and path[-1] == "error" and code == "FORBIDDEN"


def raise_for_errors(errors: list[dict[str, Any]]) -> None:
    for error in errors:
        if _is_hidden_error_field(error):
            continue
        code = (error.get("extensions") or {}).get("code", "INTERNAL_SERVER_ERROR")
        raise ERRORS_BY_CODE.get(code, ServerError)(error.get("message", "unknown error"))


def answer_data(status: int, content: bytes, url: str) -> dict[str, Any]:
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
    raise_for_errors(answer.get("errors") or [])
    if status == 413:
        raise PayloadTooLarge("request body too large")
    return answer.get("data") or {}
