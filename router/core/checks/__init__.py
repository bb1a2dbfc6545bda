"""What an answer is checked against: the tool-call checks (validate.py, with the offered tools:
offered.py, client schemas: schemas.py, calls written as text: text_calls.py, the agent's last turn:
turns.py), a route's verifiers (verify.py) and answer comparison
(compare.py). Nothing here keeps state of the running proxy beyond bounded caches; nothing here
imports router/core/live/ (tests/test_layers.py)."""
