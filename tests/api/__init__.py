"""The GraphQL-over-HTTP contract of a real server: bad input, roles, HTTP, subscriptions,
metrics, logging."""
