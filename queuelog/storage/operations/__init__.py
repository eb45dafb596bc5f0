"""What runs on either database, through the statements' names (statements.py)."""
