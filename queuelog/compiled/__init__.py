"""Compiled execution of the documents that make up most traffic (see plan.py)."""
