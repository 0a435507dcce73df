"""What several test files share, in one place: tiny recipes, ids that stress a hash index, bags,
in-process clusters, child processes and launches, a run's state compared bitwise, checkpoint
edits, raw HTTP, hosts for a job across machines. Imported as ``from helpers.NAME import ...`` (``tests/`` is on the path: pytest
puts the folder of the root ``conftest.py`` there). ``conftest.py`` keeps only fixtures and hooks."""
