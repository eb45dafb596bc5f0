"""Flow control (API.md section 9): pauses, concurrency and rate limits, per-key claims, parked claims."""
