"""Which server holds which rows: the sharding plan (``plan.py``) and id routing (``routing.py``).

Below both sides that use them: the parameter servers (``ps/``: the client splits requests by
the plan, a store checks each id is its own) and checkpoints (``checkpoint/``: each records the
plan it was saved in and loads into any other), and the planner, which makes plans."""
