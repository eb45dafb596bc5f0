"""Scrub worker-supplied error messages before they are stored (security finding V-10).

Workers report failures with free-form text, and that text is stored and served back over
GraphQL to anyone allowed to read the job. Real error messages leak: stack traces show the
deployment layout and source lines, driver errors echo connection strings with passwords,
HTTP clients print URLs with embedded tokens, and so on. ``sanitize_error`` removes what is
not needed to understand the failure while keeping the message itself readable.

The steps, in order:

1. Make the text storable: drop NUL characters and ANSI colour codes, replace lone surrogates.
2. Drop stack-trace frames (Python, Java/Kotlin/C#, Node.js) and PEM private-key blocks. The
   exception lines themselves (``ValueError: bad thing``, ``Caused by: ...``) are kept.
3. Redact secrets: URLs with credentials (``postgresql://<redacted>``), ``Authorization``
   headers and bearer tokens, ``password=``/``token: ``/``"api_key": "..."`` style values
   (which also covers libpq ``key=value`` conninfo strings), JWTs, AWS access-key ids, a few
   well-known token formats (GitHub, GitLab, Slack, Stripe, Google) and queuelog's own
   ``ql_`` API keys.
4. Replace absolute file paths (POSIX, ``~/...``, ``file://``, Windows drive and UNC) with
   ``<path>``.
5. Strip trailing whitespace, collapse runs of blank lines, cut to ``max_chars``.

Judgement calls:

* When in doubt, redact. A URL whose user-info holds credentials loses everything after the
  scheme (host and path included), because passwords are often not percent-encoded and may
  contain ``@``, ``/`` or ``:``. An unquoted secret value runs to the next whitespace, quote or
  comma, so ``password=a;b&c)`` is fully hidden, at the cost of also hiding a ``;``, ``&`` or
  ``)`` that merely follows the value (``(using password: YES)`` loses its ``)``).
* Key names match with any prefix and with a ``_``/``-``/camelCase suffix: ``PGPASSWORD``,
  ``client_secret``, ``passwordHash`` and ``api_key_id`` are all redacted; ``max_tokens`` and
  ``tokenizer`` are not.
* A ``key: value`` pair is treated like ``key=value``, so prose such as ``invalid token: expired``
  becomes ``invalid token: <redacted>``. Losing one word is cheaper than leaking a YAML secret.
* A single-segment absolute path without an extension (``/healthz``, ``/tmp``) is kept: it reveals
  nothing and is usually an HTTP route. Anything longer (``/api/v1/jobs``, ``/etc/passwd``) or
  with an extension (``/x.py``) becomes ``<path>``. Relative paths, ``and/or``, ``1/2`` and the
  path part of a URL are left alone.
* Every pattern is written so that each match attempt does bounded work or consumes what it
  scans, so the whole function is linear in the input size (tested on 1 MB inputs).
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["sanitize_error"]

_REDACTED = "<redacted>"
_PATH = "<path>"
_ELLIPSIS = "\u2026"
# Upper bound on a quoted secret value; keeps every match attempt bounded.
_MAX_QUOTED = 512

# --- 1. storability -------------------------------------------------------------------------

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]{0,32}[A-Za-z]")

# --- 2. stack frames --------------------------------------------------------------------------

# `  File "/srv/app/x.py", line 12, in run` (the `, in ...` part is absent for SyntaxError).
_PY_FRAME_RE = re.compile(r'([ \t]*)File "[^"\n]*", line \d+(?:, in .*)?[ \t]*$')

# Parenthesised frame location with one level of nesting (Node's `eval at f (x.js:1:2)`).
_PAREN = r"\((?:[^()\n]|\([^()\n]*\))*\)"
_FRAME_RE = re.compile(
    r"[ \t]*(?:"
    # Java/Kotlin/C# `at a.b.C.m(C.java:42)` and Node `at async fn [as x] (/srv/x.js:10:5)`,
    # optionally followed by a logback jar hint `~[app.jar:1.0]` or C#'s `in C:\x.cs:line 4`.
    r"at[ \t]+(?:(?:async|new)[ \t]+)*[^\s()]+(?:[ \t]+\[as[ \t][^\]\n]*\])?[ \t]*"
    rf"{_PAREN}(?:[ \t]+~?\[[^\]\n]*\]|[ \t]+in[ \t].*)?"
    # Node location-only frame `at /srv/app/x.js:10:5`, `at async file:///x.mjs:1:2`.
    r"|at[ \t]+(?:async[ \t]+)?\S+:\d+:\d+"
    # Java `... 12 more` / logback `... 12 common frames omitted`.
    r"|\.\.\.[ \t]+\d+[ \t]+(?:more|common[ \t]+frames[ \t]+omitted)"
    # Python recursion elision and the traceback header.
    r"|\[Previous[ \t]+line[ \t]+repeated[ \t]+\d+[ \t]+more[ \t]+times?\]"
    r"|Traceback[ \t]+\(most[ \t]+recent[ \t]+call[ \t]+last\):"
    r")[ \t]*$"
)

# Cheap whole-text check so texts without any frame skip the per-line loop.
_FRAME_HINT_RE = re.compile(r'^[ \t]*(?:File "|at[ \t]|\.\.\.[ \t]|\[Previous|Traceback)', re.MULTILINE)

# A PEM private key, up to its END marker or, if that is missing, the end of the text.
_PEM_RE = re.compile(
    r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY-----[\s\S]*?"
    r"(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY-----|\Z)"
)

# --- 3. secrets -------------------------------------------------------------------------------

# `scheme://rest`; whether `rest` holds credentials is decided in `_redact_url`.
_URL_RE = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]{0,31})://([^\s\"'`<>]+)")
_URL_TRAILING_PUNCT = ".,;:!?)]}"

_AUTH_HEADER_RE = re.compile(
    r"((?=[ap])(?:proxy-)?authorization\\?[\"']?[ \t]*[:=][ \t]*\\?[\"']?)"
    r"((?:bearer|basic|token|digest|negotiate|ntlm|apikey|api-key)[ \t]+)?"
    r"([^\s\"'`,]+)",
    re.IGNORECASE,
)
_BEARER_RE = re.compile(r"\b(bearer[ \t]+)([A-Za-z0-9\-._~+/]+=*)", re.IGNORECASE)

_SECRET_KEYS = (
    r"passw(?:or)?d|passphrase|pwd|secret|token|api[_-]?key"
    r"|access[_-]?key|secret[_-]?key|private[_-]?key"
)
# A secret key name may carry a suffix after `_`, `-` or a camelCase capital (`password_hash`,
# `passwordConfirm`, `api_key_id`) but not a plain lowercase one (`max_tokens`, `tokenizer`).
# Each repetition consumes exactly one alphanumeric, so there is no ambiguous backtracking.
_SECRET_KEY_SUFFIX = r"(?:(?:[_-]|(?-i:(?=[A-Z])))(?:[_-]?[A-Za-z0-9]){1,30})?"
# `key` + optional closing quote of a JSON/dict key + `=`, `:` or `=>` + the value, which is
# either quoted (`"..."`, `'...'`, or JSON-escaped `\"...\"`) or runs to whitespace/quote/comma.
_KEY_VALUE_RE = re.compile(
    rf"(?P<prefix>(?=[apst])(?:{_SECRET_KEYS}){_SECRET_KEY_SUFFIX}"
    r"(?:\\?[\"'])?[ \t]*(?:=>|[:=])[ \t]*)"
    rf"(?:(?P<q>\\?[\"'])[^\n]{{0,{_MAX_QUOTED}}}?(?<!\\)(?P=q)"
    r"|(?P<open>\\?[\"'])?[^\s\"'`,]+)",
    re.IGNORECASE,
)

_JWT_RE = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*")
_AWS_KEY_ID_RE = re.compile(
    r"(?<![A-Za-z0-9])(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Za-z0-9])"
)
_KNOWN_TOKEN_RE = re.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    r"gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub classic tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"  # GitHub fine-grained tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab personal access tokens
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe secret/restricted keys
    r"|AIza[A-Za-z0-9_-]{35}"  # Google API keys
    r"|ql_[A-Za-z0-9_-]{20,}"  # queuelog API keys (`ql_` + token_urlsafe)
    r")"
)

# --- 4. paths ---------------------------------------------------------------------------------

# `/a/b`, `~/a`, `file:///a/b`; not `and/or`, `1/2`, `./rel`, `//host` or a URL's path.
_POSIX_PATH_RE = re.compile(r"(?<![\w/.~\\-])(?:file://)?~?/(?!/)[\w.@+%~-]+(?:/[\w.@+%~-]*)*")
# `C:\Users\bob\x.py`, `C:/x` and `\\server\share\x` (also JSON-escaped with doubled `\`).
_WINDOWS_PATH_RE = re.compile(r"(?<![\w\\/])(?:[A-Za-z]:[\\/]|\\\\[\w.$-]+\\+[\w.$-])[\w.@+%~$\\/-]*")


def sanitize_error(text: str, max_chars: int) -> str:
    """Return ``text`` without stack frames, secrets and file paths, cut to ``max_chars``.

    The result is at most ``max_chars`` characters long and ends with ``…`` if it was cut;
    ``max_chars <= 0`` gives ``""``. Runs in linear time and does not raise for any ``str``.
    """
    if max_chars <= 0 or not text:
        return ""
    text = _make_storable(text)
    text = _strip_stack_frames(_PEM_RE.sub(_REDACTED, text))
    text = _redact_secrets(text)
    text = _redact_paths(text)
    return _truncate(_normalise_whitespace(text), max_chars)


def _make_storable(text: str) -> str:
    """Drop NULs and ANSI escapes; replace lone surrogates so the text encodes as UTF-8."""
    text = _ANSI_RE.sub("", text.replace("\x00", ""))
    return text.encode("utf-8", "replace").decode("utf-8")


def _leading_ws(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _strip_stack_frames(text: str) -> str:
    """Drop stack-frame lines, and the indented source lines that follow Python frames."""
    if not _FRAME_HINT_RE.search(text):
        return text
    kept: list[str] = []
    frame_indent = -1  # >= 0 right after a Python frame: more-indented lines are its source
    for line in text.splitlines():
        if frame_indent >= 0:
            if line.strip() and _leading_ws(line) > frame_indent:
                continue
            frame_indent = -1
        py_frame = _PY_FRAME_RE.match(line)
        if py_frame:
            frame_indent = len(py_frame.group(1))
            continue
        if not _FRAME_RE.match(line):
            kept.append(line)
    return "\n".join(kept)


def _redact_url(match: re.Match[str]) -> str:
    scheme, rest = match.group(1), match.group(2)
    at = rest.find("@")
    if at < 0:
        return match.group(0)
    userinfo = rest[:at]
    # `https://medium.com/@user` has an `@` in the path, not credentials.
    if ":" not in userinfo and any(c in userinfo for c in "/?#"):
        return match.group(0)
    body = rest.rstrip(_URL_TRAILING_PUNCT)
    tail = rest[len(body) :] if "@" in body else ""
    return f"{scheme}://{_REDACTED}{tail}"


def _redact_auth_header(match: re.Match[str]) -> str:
    return f"{match.group(1)}{match.group(2) or ''}{_REDACTED}"


def _redact_bearer(match: re.Match[str]) -> str:
    token = match.group(2)
    # "bearer token", "Bearer authentication": prose, not a credential.
    if len(token) < 8 or token.isalpha():
        return match.group(0)
    return match.group(1) + _REDACTED


def _redact_key_value(match: re.Match[str]) -> str:
    prefix = match.group("prefix")
    quote = match.group("q")
    if quote:
        return f"{prefix}{quote}{_REDACTED}{quote}"
    return f"{prefix}{match.group('open') or ''}{_REDACTED}"


_SECRET_RULES: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    (_URL_RE, _redact_url),
    (_AUTH_HEADER_RE, _redact_auth_header),
    (_BEARER_RE, _redact_bearer),
    (_KEY_VALUE_RE, _redact_key_value),
    (_JWT_RE, _REDACTED),
    (_AWS_KEY_ID_RE, _REDACTED),
    (_KNOWN_TOKEN_RE, _REDACTED),
)


def _redact_secrets(text: str) -> str:
    for pattern, replacement in _SECRET_RULES:
        text = pattern.sub(replacement, text)
    return text


def _redact_posix_path(match: re.Match[str]) -> str:
    path = match.group(0)
    body = path.rstrip(".")  # a sentence-ending period is not part of the path
    tail = path[len(body) :]
    if body.startswith(("file:", "~")):
        return _PATH + tail
    segments = [segment for segment in body.split("/") if segment]
    if len(segments) < 2 and "." not in body:
        return path  # `/healthz`, `/tmp`: harmless, usually an HTTP route
    return _PATH + tail


def _redact_paths(text: str) -> str:
    text = _WINDOWS_PATH_RE.sub(_PATH, text)
    return _POSIX_PATH_RE.sub(_redact_posix_path, text)


def _normalise_whitespace(text: str) -> str:
    """Strip trailing whitespace and leading/trailing blank lines; keep one blank line per run."""
    out: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return "\n".join(out)


def _truncate(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: max_chars - 1].rstrip() + _ELLIPSIS
