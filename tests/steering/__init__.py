"""Steering jobs (API.md section 12): cancelling a running job, expiry, snooze, edits, progress, attempts."""
