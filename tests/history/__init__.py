"""A randomised, model-checked concurrency test of queuelog (API.md sections 3, 9, 10 and 12).

Client threads (`clients.py`, `subscriber.py`) drive a real deployment (`deployment.py`)
with random mixes of operations chosen by seeded generators (`generator.py`); every
operation and its answer is recorded with the client's send and receive times
(`recorder.py`), the database is read straight (`dump.py`), and the checker (`checker.py`,
over `facts.py`, `timeline.py` and the `rules_*.py` modules) replays the history against
the contract's rules; `report.py` prints what broke. `harness.py` runs the phases;
`model.py` is the recorded history, written as JSON and read back by `python -m history
FILE` (from tests/) to check it again.

The checker asserts invariants, never timings: the only clock it uses is the one client and
database share (this host's), and only to bound when something could have happened.
"""
