"""`queuelog keys`: create, list and revoke API keys, straight in the database."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from queuelog.cli.database import database_url, open_migrated

if TYPE_CHECKING:
    pass
# Which roles may enqueue, and so have a max priority that means something (API.md section 2).
ENQUEUING_ROLES = frozenset({"ADMIN", "PRODUCER"})


def cmd_keys(args: argparse.Namespace) -> None:
    from queuelog import keys

    engine = open_migrated(database_url(args))
    try:
        if args.keys_command == "create":
            roles = [keys.parse_role(r) for r in args.roles]
            priority = keys.parse_priority(args.max_priority) if args.max_priority else None
            record, plaintext = keys.create_key(engine, args.name, roles, priority)
            role_names = sorted(r.value for r in record.roles)
            priority_text = _max_priority(role_names, record.max_priority.name)
            shown = "" if priority_text == "-" else f", max priority {priority_text}"
            roles_text = ",".join(role_names)
            print(f"created key {record.name!r} (roles {roles_text}{shown}); it is shown only once:")
            print(plaintext)
        elif args.keys_command == "list":
            print(f"{'NAME':<24} {'ROLES':<28} {'MAX PRIORITY':<13} {'CREATED':<20} STATUS")
            for key in keys.list_keys(engine):
                status = "revoked" if key.revoked_at else "active"
                role_names = sorted(r.value for r in key.roles)
                print(
                    f"{key.name:<24} {','.join(role_names):<28} "
                    f"{_max_priority(role_names, key.max_priority.name):<13} "
                    f"{key.created_at:%Y-%m-%d %H:%M:%S}  {status}"
                )
        else:
            keys.revoke_key(engine, args.name)
            print(f"revoked key {args.name!r}")
    finally:
        engine.dispose()


def _max_priority(role_names: Sequence[str], priority: str) -> str:
    """A key's max priority as listed: "-" for a key that may not enqueue (WORKER, VIEWER)."""
    return priority if ENQUEUING_ROLES.intersection(role_names) else "-"
