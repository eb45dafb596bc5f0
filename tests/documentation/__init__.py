"""The README, docs/, examples/ and deploy/ run and checked as written."""
