"""Strawberry permission classes: the role check that comes before anything else."""

from __future__ import annotations

from typing import Any

from strawberry.permission import BasePermission
from strawberry.types import Info

from queuelog.auth import Action, Principal


def principal_of(info: Info) -> Principal | None:
    return getattr(info.context, "principal", None)


class RoleAllows(BasePermission):
    """The caller's roles include one that may perform `action` (API.md section 2 table)."""

    error_extensions = {"code": "FORBIDDEN"}

    def __init__(self, action: Action) -> None:
        self.action = action
        self.message = f"your key's roles may not {action.value.replace('_', ' ')}"

    def has_permission(self, source: Any, info: Info, **kwargs: Any) -> bool:
        principal = principal_of(info)
        return bool(principal is not None and principal.may(self.action))


class AdminOnlyField(BasePermission):
    """`Job.error` is ADMIN only: others get null plus FORBIDDEN at this path."""

    message = "only ADMIN keys may read Job.error"
    error_extensions = {"code": "FORBIDDEN"}

    def has_permission(self, source: Any, info: Info, **kwargs: Any) -> bool:
        principal = principal_of(info)
        return bool(principal is not None and principal.may(Action.READ_ERROR))


class AdminOnlyAttemptError(AdminOnlyField):
    """`JobAttempt.error`, under the same permission as `Job.error`."""

    message = "only ADMIN keys may read JobAttempt.error"
