"""SQLite's text of every statement in statements.py, built once with SQLAlchemy Core.

The operations (storage/operations/) run these on the driver's connection, whose statement
cache keeps each one prepared. Constants are written into the SQL (`lit`), values are always
named parameters. SQLite's statements name the partial indexes they need (INDEXED BY):
lacking statistics, its planner may otherwise pick a status index and sort every pending
row. Each concern's statements are in a module of their own, gathered here in one class.
"""

from __future__ import annotations

from queuelog.storage.sqlite.statements.bulk import BulkStatements
from queuelog.storage.sqlite.statements.cancel_requests import CancelRequestStatements
from queuelog.storage.sqlite.statements.claims import ClaimStatements
from queuelog.storage.sqlite.statements.dependencies import DependencyStatements
from queuelog.storage.sqlite.statements.events import EventStatements
from queuelog.storage.sqlite.statements.flow import FlowStatements
from queuelog.storage.sqlite.statements.job_types import JobTypeStatements
from queuelog.storage.sqlite.statements.jobs import JobStatements
from queuelog.storage.sqlite.statements.progress import ProgressStatements
from queuelog.storage.sqlite.statements.reads import ReadStatements
from queuelog.storage.sqlite.statements.rescheduling import ReschedulingStatements
from queuelog.storage.sqlite.statements.schedules import ScheduleStatements


class SqliteStatements(
    JobStatements,
    ClaimStatements,
    FlowStatements,
    BulkStatements,
    ReadStatements,
    EventStatements,
    DependencyStatements,
    ScheduleStatements,
    CancelRequestStatements,
    ReschedulingStatements,
    JobTypeStatements,
    ProgressStatements,
):
    """Every statement, by name (statements.Statements)."""
