"""PostgreSQL: the connections, the group-commit writers, the text of every statement,
LISTEN and VACUUM."""
