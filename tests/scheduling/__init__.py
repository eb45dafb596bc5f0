"""Cron schedules, their ticker and catch-up, and dependencies between jobs (API.md section 10)."""
