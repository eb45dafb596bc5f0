"""Tests that need no server and no database: pure functions, and the worker's parts with the server
played by the test."""
