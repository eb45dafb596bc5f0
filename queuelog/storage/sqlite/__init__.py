"""SQLite: the connections, the group-commit writer and the text of every statement."""
