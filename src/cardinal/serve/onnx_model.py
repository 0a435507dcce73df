"""The dense model as ONNX: exported once from the trained torch model, run by onnxruntime.

    export_onnx(model, n_dense, path)        model.onnx: inputs dense (B, n_dense), emb (B, fields, dim)
                                             (a ``Projected`` model's: (B, sum of the fields' dims))
                                             [, wide (B, fields)]; output p (B,), the click probabilities
    runner = DenseRunner(path.read_bytes())  runner.predict({"dense": ..., "emb": ..., "wide": ...}) -> (B,)
    runner.reweighted(state_dict)            the same graph with a checkpoint's weights (a reload)

Exported with ``optimize=False``, so every parameter and buffer stays an initializer named as in
the model's state dict (an optimized graph folds a batch norm's running statistics into
constants when they look trivial): a reload swaps weights by name, with no tracing of the model
and no torch on the serving path. Every other runtime that reads ONNX computes the same.
"""

import contextlib
import io
import logging
import warnings
from pathlib import Path

import numpy as np

PREFIX = "m."  # the wrapper's attribute: initializer names are PREFIX + state-dict keys


def export_onnx(model, n_dense: int, path: Path) -> None:
    """Write ``model`` (a ``CTRModel``, in eval mode here) as ONNX with a dynamic batch size."""
    import torch

    class Probabilities(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, dense, emb, wide=None):
            return torch.sigmoid(self.m(dense, emb, wide))

    model.eval()
    dim = model.dim if model.uses_embedding else 0
    emb = (sum(model.field_dims),) if hasattr(model, "field_dims") else (model.n_fields, dim)  # Projected: side by side
    example = (torch.zeros(2, n_dense), torch.zeros(2, *emb))
    names = ["dense", "emb"]
    if model.uses_wide:
        example, names = example + (torch.zeros(2, model.n_fields),), names + ["wide"]
    batch = torch.export.Dim("batch", min=1, max=1 << 24)
    quiet = logging.getLogger("torch.onnx")  # "torchvision is not installed": ops these models never use
    level = quiet.level
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
        warnings.simplefilter("ignore")
        quiet.setLevel(logging.ERROR)
        torch.onnx.export(Probabilities(model), example, str(path), input_names=names, output_names=["p"],
                          dynamic_shapes={n: {0: batch} for n in names}, dynamo=True, optimize=False,
                          verbose=False, report=False, external_data=False)
        quiet.setLevel(level)


class DenseRunner:
    """One onnxruntime session over an exported graph; ``predict`` may be called from any thread."""

    def __init__(self, onnx_bytes: bytes, threads: int = 1):
        import onnxruntime as ort

        self.onnx_bytes, self.threads = onnx_bytes, threads
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def predict(self, feed: dict[str, np.ndarray]) -> np.ndarray:
        return self.session.run(None, {n: feed[n] for n in self.inputs})[0].reshape(-1)

    def reweighted(self, state: dict) -> "DenseRunner":
        """A runner of the same graph with ``state``'s weights (a torch state dict of the same model),
        refused whole when a name or shape does not match (the running model stays)."""
        import onnx
        from onnx import numpy_helper

        graph = onnx.load_from_string(self.onnx_bytes)
        inits = {i.name: i for i in graph.graph.initializer}
        new = {}
        for key, value in state.items():
            if key.endswith("num_batches_tracked"):
                continue  # a training counter, not in the graph
            init = inits.get(PREFIX + key)
            array = value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)
            if init is None or tuple(init.dims) != array.shape:
                raise ValueError(f"the exported graph has no weight {key!r} of shape {array.shape}: the checkpoint "
                                 f"is of another model; export it again")
            new[PREFIX + key] = numpy_helper.from_array(array.astype(np.float32), PREFIX + key)
        for init in graph.graph.initializer:
            if init.name in new:
                init.CopyFrom(new[init.name])
        return DenseRunner(graph.SerializeToString(), self.threads)
