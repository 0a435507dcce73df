"""Checkpoints on disk, in one place: the format, how it is written, and the one ``Reader``.

    layout.py     where each file lies and what it is called; finding committed checkpoints
    durable.py    files that count only when complete: fsync, crc32, plain names
    write.py      a shard's files and manifest, then the commit marker over every shard
    chain.py      delta chains: each link's run and the exact commit it applies on
    verify.py     a commit and its manifests checked; saved tables against a store's
    rows.py       rows read back, each array checked, into any shard count and plan
    columns.py    a table saved in other column pieces, joined and cut anew
    clustered.py  a clustered (Saec) table's own files
    dense.py      the trainer's dense state, without pickle (the one module that imports torch)
    retention.py  which checkpoints a run keeps
    best.py       the marker naming a run's best checkpoint
    reader.py     ``Reader``: what training, serving, the planner and the servers read through

The servers save (``write.py``, from ``ps/``); everyone reads through ``Reader``. Nothing is
imported here, so that a module of the package costs only its own imports (the CLI answers
cheap commands without numpy; a server never imports torch).
"""
