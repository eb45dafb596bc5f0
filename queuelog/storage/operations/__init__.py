"""What runs on either database: the queue's writes and reads, through the statements' names
(statements.py), and nothing else.

Each function hands the SQL to the connection, asking it for each statement by name
(`tx.sql.INSERT_JOB_ONCE`): the connection carries its database's text. Writes take a
`WriteTx` (a group-commit transaction: see transaction.py) and report each transition
through `tx.record`; reads take a plain connection. State guards (`status = 'running' AND
attempt = :attempt`) sit in every UPDATE, so a row that changed since it was read is left
alone. The rules (limits, sanitising, retry policy) are the queue's; they arrive here as
values.
"""
