"""Where a training step's time goes: the default recipe's trainer, timed by phase, then the
same steps under torch.profiler (its top ops by host time, and by device time on CUDA).

    python benchmarks/step_profile.py [--device cpu|cuda] [--rows N] [--steps N] [--set key=value ...] [--tag T]

One untimed warm-up run first (numba's compiles, CUDA's lazily loaded kernels), then a timed run
(samples/s, the trainer's per-step phases, on CUDA the staging's own timers: ``DeviceRows.seconds``),
then a profiled run of the same batches. Writes ``results/step_profile[_T].md``. For Python-level
stacks run it under ``py-spy record -f raw`` (the device kit does).
"""

import argparse
import os
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))
from e2e import Batches, Cached, run_cardinal  # noqa: E402
from report import write  # noqa: E402

from cardinal.recipe import load  # noqa: E402
from cardinal.train import Trainer  # noqa: E402


def thread_cpu() -> Counter:
    """CPU seconds so far of each of this process's threads, by Python thread name (a thread Python did not
    start, e.g. torch's OpenMP workers, as "native threads"); empty where /proc is not."""
    out: Counter = Counter()
    if not os.path.isdir("/proc/self/task"):
        return out
    names, tick = {t.native_id: t.name for t in threading.enumerate()}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # ended meanwhile
            continue
        name = names.get(int(tid), "native threads (torch's OpenMP workers...)").rstrip("0123456789_")
        out[name] += (int(fields[11]) + int(fields[12])) / tick  # utime + stime
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rows", type=int, default=200_000, help="generated training rows")
    parser.add_argument("--steps", type=int, default=60, help="steps of the timed and the profiled run")
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--set", action="append", default=[], help="more recipe overrides (key=value)")
    parser.add_argument("--top", type=int, default=25, help="profiler rows shown (0: no profiled run)")
    parser.add_argument("--tag", default="", help="results/step_profile_TAG.md")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("benchmarks/step_profile.py: no CUDA device here; nothing measured")
        return 0
    sets = [f"data.batch_size={args.batch}", "eval.every=0", 'train.baseline="none"',
            f'train.device="{args.device}"', "checkpoint.minutes=0", f"data.synthetic.rows={args.rows}",
            f"data.synthetic.eval_rows={max(args.rows // 10, 1000)}", *args.set]
    recipe = load("criteo_synthetic", sets)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe = Trainer(recipe, tmp / "probe", progress=False)  # generates the data set once
        train = Cached(probe.train_data, args.steps)
        evaluation = Cached(probe.eval_data, 1)
        probe.close()
        steps, samples = len(train.batches), sum(len(b) for b in train.batches)
        lr, halves = recipe.sparse_optimizer["lr"], [evaluation, evaluation]
        run_cardinal(recipe, lr, tmp / "warmup", Batches(train.batches[:5], train), halves)
        seen = {}

        def read(trainer):
            seen["cpu"] = thread_cpu()  # before the trainer ends its threads
            seen["phases"] = {k: 1000 * v / steps for k, v in trainer.timings.items()}
            seen["phases"].update({k: 1000 * v / steps for k, v in trainer.embedding.timings.items()})
            seen["staging"] = dict(getattr(trainer.staging, "seconds", {}) or {})
        seconds = run_cardinal(recipe, lr, tmp / "timed", train, halves, on_trainer=read,
                               before_fit=lambda: seen.update(cpu_before=thread_cpu()))[0]
        phases, staging = seen["phases"], seen["staging"]
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device == "cuda" else [])
        prof = None
        if args.top:
            with profile(activities=activities) as prof:
                run_cardinal(recipe, lr, tmp / "profiled", train, halves)
    rate = samples / seconds
    rows = [{"phase": k, "ms per step": v} for k, v in phases.items()]
    rows += [{"phase": f"staging: {k}", "ms per step": 1000 * v / steps} for k, v in staging.items()]
    rows.append({"phase": "whole step", "ms per step": 1000 * seconds / steps})
    cpu = {k: 1000 * (v - seen["cpu_before"].get(k, 0.0)) / steps for k, v in seen["cpu"].items()}
    rows += [{"phase": f"CPU of thread: {k}", "ms per step": v}
             for k, v in sorted(cpu.items(), key=lambda kv: -kv[1]) if v >= 0.01]
    by_cpu = (prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60)
              if prof else "")
    by_device = (prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=args.top,
                                           max_name_column_width=60) if prof and args.device == "cuda" else "")
    print(by_cpu)
    print(by_device)
    name = "step_profile" + (f"_{args.tag}" if args.tag else "")
    write(name, f"Where a step's time goes ({args.device}, batch {args.batch}, {args.rows:,} rows)", rows, [
        f"{steps} steps, {rate:,.0f} samples/s (timed run, after a warm-up run); threads: {torch.get_num_threads()}",
        "phases overlap: compute holds the next batch's staging (stage_ahead) and the hooks' pushes",
        "CPU of thread: each thread's user + system CPU over the timed fit (its final evaluation included) over its "
        "steps; the step's thread (MainThread) is the critical path when its CPU nears the whole step; torch's "
        "OpenMP workers spin while idle (OMP_WAIT_POLICY), so theirs is an upper bound on their work",
        f"overrides: {' '.join(args.set) or 'none'}",
        f"reproduce: python benchmarks/step_profile.py --device {args.device} --rows {args.rows} --steps {args.steps}"
        f" --batch {args.batch}"
        + "".join(f" --set {s}" for s in args.set) + (f" --tag {args.tag}" if args.tag else ""),
    ], extra={"samples_per_s": rate, "profile_by_host_time": by_cpu, "profile_by_device_time": by_device})
    return 0


if __name__ == "__main__":
    sys.exit(main())
