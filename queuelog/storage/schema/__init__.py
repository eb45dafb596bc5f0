"""The rows: column types, the tables, and how a job's row is read and written."""
