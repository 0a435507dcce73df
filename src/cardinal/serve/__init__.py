"""From training to serving: ``cardinal export`` and ``cardinal serve``.

    export.py      a run's checkpoint -> DIR: model.onnx, tables/ (live rows, a form each), manifest.json
    tables.py      a served table: sorted ids and the rows in fp32, fp16, int8 or saec form
    onnx_model.py  the dense model exported to ONNX, run by onnxruntime; new weights by name on reload
    model.py       ``ServingModel``: an export loaded; training's embedding path in eval mode + the graph
    requests.py    a request body -> the readers' rows, by the readers' parser; ``BadRequest``
    follow.py      a training run's newer checkpoints (deltas applied as such) -> the next model
    overlay.py     a served table with its recent deltas beside it, folded in now and then
    follow_process.py  ``follow.py``'s reading in a child process at nice 19: what ``--follow`` runs
    http.py        the HTTP server: batching, health, readiness, Prometheus metrics, reloads
"""
