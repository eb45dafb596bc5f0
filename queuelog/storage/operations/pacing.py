"""How each database paces chunked work: what the chunks of bulk actions (bulk.py) and of
settlement sweeps (settlements.py) aim at, and the pause after each. SQLite's writer runs on
the event loop, so its chunks are short and need no pause; PostgreSQL's writers run beside
each other on connections of their own (bulk.py says why they aim where they do)."""

from __future__ import annotations

from dataclasses import dataclass

from queuelog.storage.operations import bulk, settlements


@dataclass(frozen=True, slots=True)
class Pacing:
    bulk_chunk_seconds: float  # what a bulk action's chunk aims at
    bulk_pause_ratio: float  # a bulk action's pause after a chunk, per its time
    bulk_scan_rows: int  # the rows of each walk a bulk action's chunk passes at most
    settle_chunk_seconds: float  # what a sweeper's chunk aims at


SQLITE = Pacing(bulk.CHUNK_SECONDS, bulk.PAUSE_RATIO, bulk.SCAN_ROWS, settlements.CHUNK_SECONDS)
POSTGRES = Pacing(bulk.PG_CHUNK_SECONDS, bulk.PG_PAUSE_RATIO, bulk.PG_SCAN_ROWS, bulk.PG_CHUNK_SECONDS)
