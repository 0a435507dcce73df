"""Idle OpenMP threads sleep rather than spin: ``OMP_WAIT_POLICY=PASSIVE`` unless the environment
already says otherwise.

torch's intra-op threads (GNU OpenMP) spin after each parallel region by default, holding a core.
A worker's step shares its cores with threads of its own between those regions: the embedded
shards serve the next batch's pulls and apply this one's pushes, the push thread routes
(``train/threads.py``). A spinning thread takes the core they need, and each parallel region then
waits for whichever of its threads was descheduled. On 2 busy cores the criteo_synthetic recipe
at batch 1024 trained at 48-66 ms a step passive against 640-910 ms spinning, the same bits
(the policy says only how an idle thread waits).

libgomp reads the variable once, when the first ``import torch`` loads it, so this runs on
``import cardinal`` (``cardinal/__init__.py``), before torch; a program that imports torch first
keeps its own setting.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
