"""The Python SDK: the clients, the worker, LocalQueue and the documented public names."""
