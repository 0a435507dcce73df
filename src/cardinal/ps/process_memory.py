"""What a server process holds besides its tables, and how ``ps.memory_budget`` sizes it.

    floor        the interpreter, numpy, numba and its kernels, gRPC, RocksDB's code: FLOOR,
                 fixed (no torch: cardinal.model_traits gives the server what it reads of models)
"""

FLOOR = 150_000_000  # an idle `cardinal server` measured 133-138 MB (benchmarks/server_rss.py)
