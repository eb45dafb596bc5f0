"""The rows: column types, the tables, a job's row read and written (codec, new_job), and the
counters' keys."""
