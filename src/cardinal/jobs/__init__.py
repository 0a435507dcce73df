"""Tools that act on a whole job rather than one process: ``cardinal launch`` (servers and
workers on one machine, ``launch.py``), ``cardinal sweep`` (a grid of runs, ``sweep.py``) and
``cardinal top`` (a running job's metrics, live, ``top.py``). The CLI (``cli.py``) calls them;
they import nothing of it."""
