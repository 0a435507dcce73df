"""``[train]``: the run itself: its name and length, its seed, where it runs and keeps its
directory, and its baseline. When it evaluates, checkpoints and reports are ``[eval]``,
``[checkpoint]`` and ``[metrics]``."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TrainConfig:
    name: str = field(default="run", metadata={"help": "the run directory's name: run_dir/name-YYYYmmdd-HHMMSS"})
    epochs: int = field(default=1, metadata={
        "help": "passes over the training data (a total: on --resume, from the run's start)"})
    steps: int = field(default=0, metadata={
        "help": "stop after this many steps (0: run the epochs; a total, as epochs)"})
    seed: int = field(default=0, metadata={
        "help": "torch's seed (dense weights) and the data order where it is shuffled"})
    threads: int = field(default=0, metadata={
        "help": "one thread budget for the worker (train/threads.py): torch's intra-op threads, Cardinal's kernel "
                "threads (dedup, pooling, the embedded shards' pull/push) and numba's all get it. 0: the cores "
                "this worker may use (OMP_NUM_THREADS when a launcher split the machine, else its CPU affinity), "
                "half of them with embedded servers, whose kernels run while torch computes (torch at least 2, the "
                "kernels at least 1). The batch prefetcher adds one thread outside the budget"})
    device: str = field(default="auto", metadata={
        "help": 'where the dense model, pooling and the loss run: "cpu", "cuda" (an error without a GPU), or "auto" '
                "(cuda when torch sees a GPU, else cpu); embedding rows stay on the servers and dedup on the CPU "
                "either way (worker/device.py)"})
    run_dir: str = field(default="runs", metadata={"help": "the folder that holds one directory per run"})
    baseline: str = field(default="lr", metadata={
        "help": '"lr": train logistic regression on the same batches and report it beside the model (its own '
                'tables lr_*, on the same servers); "none": no baseline'})

    def __post_init__(self):
        if self.epochs < 1 or self.steps < 0:
            raise ValueError("train.epochs must be >= 1; train.steps >= 0")
        if self.threads < 0:
            raise ValueError(f"train.threads must be >= 0 (0: the cores this worker may use), got {self.threads}")
        if self.device not in ("cpu", "cuda", "auto"):
            raise ValueError(f"train.device must be 'cpu', 'cuda' or 'auto', got {self.device!r}")
        if self.baseline not in ("lr", "none"):
            raise ValueError(f"train.baseline must be 'lr' or 'none', got {self.baseline!r}")
