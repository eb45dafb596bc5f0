"""GraphiQL and the dashboard in a real browser (Debian's chromium driven by playwright)."""
