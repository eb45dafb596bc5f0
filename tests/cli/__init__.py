"""The `queuelog` command line, run as real subprocesses."""
