"""How the connection learns the ids of the rows an executemany inserted."""

from __future__ import annotations

from queuelog.storage.sqlite.statements import SqliteStatements

# The last id AUTOINCREMENT gave out in a table: SqliteConnection.insert_ids reads it on
# either side of an executemany to learn the ids of the rows it inserted.
LAST_JOB_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'jobs'"
LAST_EVENT_ID = "SELECT seq FROM sqlite_sequence WHERE name = 'job_events'"
LAST_ID_AFTER = {SqliteStatements.INSERT_JOB: LAST_JOB_ID, SqliteStatements.INSERT_EVENT: LAST_EVENT_ID}
