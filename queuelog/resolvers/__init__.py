"""One thin function per GraphQL operation: caller from the context, a queue call, a type out."""
