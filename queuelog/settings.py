"""Every QUEUELOG_* variable of API.md section 5, read in one place.

Each field is also a `queuelog serve` flag (see cli/parser.py): the flag's name is the field's
name with dashes, and the CLI passes flags on to server processes through the same
environment variables, so `--workers N` processes all see one configuration.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from queuelog.errors import echo

ENV_PREFIX = "QUEUELOG_"
EVENT_FEEDS = ("auto", "notify", "poll", "local")
LOG_FORMATS = ("text", "json")
# What a boolean setting accepts, as a variable and as a flag's value, in any case.
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
BOOLEAN_FORMS = "true/false, 1/0, yes/no or on/off (any case)"


class SettingsError(ValueError):
    """A configuration value that cannot be used; the message names the variable."""


def _split_csv(value: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in value.split(",") if item.strip())


@dataclass(frozen=True)
class Settings:
    database_url: str = "sqlite:///queuelog.db"
    job_types: tuple[str, ...] = ()
    max_payload_bytes: int = 65536
    max_body_bytes: int = 1048576
    max_error_chars: int = 2000
    lease_seconds: int = 300
    retry_base_seconds: int = 10
    retry_max_seconds: int = 3600
    retention_seconds: int = 604800
    prune_interval_seconds: int = 60
    max_depth: int = 10
    max_aliases: int = 30
    max_tokens: int = 2000
    # A document's cost: fields it may return, lists counted by their bound (schema/cost.py).
    max_cost: int = 50000
    # A query's (or subscription event's) answer, in bytes, measured while it is built
    # (schema/response_size.py); mutations are not cut.
    max_response_bytes: int = 16777216
    # How long after cancelJob on a RUNNING job its holder has to stop before the job is
    # ended CANCELLED without it (API.md section 12).
    cancel_grace_seconds: int = 30
    # When set, GET /metrics wants `Authorization: Bearer <token>`.
    metrics_token: str = ""
    # When set, any other Host header gets 400 (DNS rebinding); `*.example.com` allowed.
    allowed_hosts: tuple[str, ...] = ()
    graphiql: bool = True
    dashboard: bool = True
    cors_origins: tuple[str, ...] = ()
    # How a server hears other server processes' events (Scaling out in the README):
    # auto = notify on PostgreSQL, poll on SQLite (hears any process on the same file).
    event_feed: str = "auto"
    # false: every POST goes through Strawberry, never the precompiled plans (queuelog/compiled).
    compiled: bool = True
    # text: uvicorn's and Python's usual lines; json: one JSON object per line on stdout for
    # every record (queuelog/logformat.py), for log shippers.
    log_format: str = "text"
    # Not in the contract's table: how often the server looks for expired leases.
    lease_check_seconds: float = field(default=1.0, metadata={"internal": True})
    # Nor this: how often, at most, a server looks for PENDING jobs whose expiresAt has come
    # (one read of ix_jobs_expiry); a job expires within a second of it (API.md section 12).
    expiry_check_seconds: float = field(default=0.5, metadata={"internal": True})
    # Nor this: how often a server on PostgreSQL looks for tables to vacuum where autovacuum
    # does not run (storage/postgres/vacuum.py). Claims walk the dead entries left since the last
    # VACUUM: at 8k claims/s, a check every 15 s would let a claim at 1M jobs take 1.6x its
    # time at 1k.
    vacuum_check_seconds: float = field(default=5.0, metadata={"internal": True})

    def __post_init__(self) -> None:
        positive = (
            "max_payload_bytes",
            "max_body_bytes",
            "max_depth",
            "max_aliases",
            "max_tokens",
            "max_cost",
            "max_response_bytes",
            "prune_interval_seconds",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise SettingsError(f"{env_name(name)} must be at least 1")
        non_negative = ("max_error_chars", "retry_base_seconds", "retry_max_seconds", "retention_seconds")
        for name in non_negative:
            if getattr(self, name) < 0:
                raise SettingsError(f"{env_name(name)} must not be negative")
        if not 1 <= self.lease_seconds <= 86400:
            raise SettingsError(f"{env_name('lease_seconds')} must be between 1 and 86400")
        if not 1 <= self.cancel_grace_seconds <= 86400:
            raise SettingsError(f"{env_name('cancel_grace_seconds')} must be between 1 and 86400")
        if self.event_feed not in EVENT_FEEDS:
            raise SettingsError(f"{env_name('event_feed')} must be one of {', '.join(EVENT_FEEDS)}")
        object.__setattr__(self, "log_format", self.log_format.strip().lower())  # JSON, Json: json
        if self.log_format not in LOG_FORMATS:
            raise SettingsError(f"{env_name('log_format')} must be one of {', '.join(LOG_FORMATS)}")
        for host in self.allowed_hosts:
            _check_host_pattern(host)
        if self.lease_check_seconds <= 0:
            raise SettingsError(f"{env_name('lease_check_seconds')} must be positive")
        if self.expiry_check_seconds <= 0:
            raise SettingsError(f"{env_name('expiry_check_seconds')} must be positive")
        if self.vacuum_check_seconds <= 0:
            raise SettingsError(f"{env_name('vacuum_check_seconds')} must be positive")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Defaults, then QUEUELOG_* variables, then explicit overrides (e.g. CLI flags)."""
        environ = os.environ if environ is None else environ
        # Each value is of its field's kind (parse_value goes by field_kind), which no static
        # type can say of a dict built field by field.
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(env_name(f.name))
            if raw is not None:
                values[f.name] = parse_value(f, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The environment that makes `from_env` rebuild these settings in another process."""
        env: dict[str, str] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                env[env_name(f.name)] = ",".join(value)
            elif isinstance(value, bool):
                env[env_name(f.name)] = "true" if value else "false"
            else:
                env[env_name(f.name)] = str(value)
        return env

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)


def _check_host_pattern(host: str) -> None:
    """A QUEUELOG_ALLOWED_HOSTS entry as Starlette's TrustedHostMiddleware takes it: a pattern
    it would only `assert` against, or one with a port (never matched: ports are not
    compared), is refused here, before the server starts."""
    if "*" in host[1:] or (host.startswith("*") and not host.startswith("*.")):
        raise SettingsError(f"{env_name('allowed_hosts')}: {echo(host)}: wildcards look like *.example.com")
    if ":" in host and not host.startswith("["):
        raise SettingsError(
            f"{env_name('allowed_hosts')}: {echo(host)}: no port here (IPv6 in brackets: [::1])"
        )


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def parse_value(f: dataclasses.Field[Any], raw: str) -> object:
    kind = field_kind(f)
    name = env_name(f.name)
    if kind is tuple:
        return _split_csv(raw)
    if kind is bool:
        value = parse_bool(raw)
        if value is None:
            raise SettingsError(f"{name} must be a boolean: {BOOLEAN_FORMS}, not {echo(raw)}")
        return value
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a whole number, not {echo(raw)}") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a number, not {echo(raw)}") from None
    return raw


def parse_bool(raw: str) -> bool | None:
    """A boolean as people type it (TRUE_WORDS, FALSE_WORDS, any case); None for anything else."""
    lowered = raw.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    return None


def field_kind(f: dataclasses.Field[Any]) -> type:
    """The Python type of a field, from its default (annotations are strings here)."""
    return type(f.default)


def public_fields() -> list[dataclasses.Field[Any]]:
    return [f for f in fields(Settings) if not f.metadata.get("internal")]
