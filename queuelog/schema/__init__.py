"""The GraphQL vocabulary: types, inputs, permissions, the request context, limits, error and log policy.

`queuelog.resolvers` builds on it; `queuelog.graphql_api` assembles both into the Schema.
"""
