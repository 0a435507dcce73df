"""What a learner can reach on generated data: the teacher's eval AUC restricted to what training shows.

    python benchmarks/teacher_bound.py [--rows 3000000] [--eval-rows 100000]

Replays ``cardinal.data.synthetic.generate`` (same seeds, same random draws in the same order)
and keeps the Zipf ranks the TSV hides, then scores the eval split with the teacher's logit in
which every id seen fewer than k times in training contributes nothing (its first-order weight
and its FM latent vector are unknown to a learner: their prior mean is 0). k = 1 is the best any
model trained on this data can do with perfect estimates of every seen id; larger k shows how much
rides on rare ids, whose few examples cannot estimate a weight well.
"""

import argparse
import json

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

from cardinal.data import tsv_kernels as K
from cardinal.data.synthetic import CHUNK, LATENT, SyntheticConfig, Teacher, _gauss, _hash


def parts(teacher: Teacher, n: int, rng: np.random.Generator):
    """As ``Teacher.sample``, drawing the same numbers, but returns ranks and per-field terms."""
    cfg = teacher.cfg
    ranks = np.stack([(rng.zipf(cfg.skew, n) - 1) % v for v in teacher.vocab], 1)
    cat_ok = rng.random((n, K.N_CAT)) >= cfg.missing
    ints = np.floor(np.exp(rng.normal(teacher.dense_mu, 1.0, (n, K.N_INT)))).astype(np.int64)
    ints[:, 1] -= 3
    int_ok = rng.random((n, K.N_INT)) >= cfg.missing
    first = np.stack([0.25 * _gauss(_hash(cfg.seed, f, ranks[:, f], 1)) * cat_ok[:, f] for f in range(K.N_CAT)], 1)
    latent = {}
    for f in teacher.pairs:
        vf = np.stack([_gauss(_hash(cfg.seed, f, ranks[:, f], 2 + k)) for k in range(LATENT)], 1)
        latent[int(f)] = vf * 0.35 * cat_ok[:, f:f + 1]
    dense = teacher.bias + (np.log1p(np.maximum(ints, 0)) * int_ok) @ teacher.dense_w
    return ranks, cat_ok, first, latent, dense


def estimated(ranks, seen, first, latent, fisher: float = 0.19):
    """(first, latent) as a learner with the true prior could know them from ``seen`` examples of
    each id: the Gaussian posterior mean of each weight, w_hat = s (w + e), e ~ N(0, 1 / (n I)),
    s = prior / (prior + 1 / (n I)), with I = p (1 - p) ~ 0.19 the Fisher information of one
    example (for a latent element, times E[(sum of the other pair fields' latents)^2] ~ 1)."""
    def shrink(w, f, salt, prior):
        n = seen[:, f].astype(np.float64)
        noise_var = 1.0 / np.maximum(n * fisher, 1e-12)
        e = _gauss(_hash(99, f, ranks[:, f], salt)) * np.sqrt(noise_var)
        return np.where(n > 0, prior / (prior + noise_var) * (w + e), 0.0)

    first = np.stack([shrink(first[:, f], f, 1, 0.0625) for f in range(K.N_CAT)], 1)
    latent = {f: np.stack([shrink(v[:, k], f, 2 + k, 0.1225) for k in range(LATENT)], 1) for f, v in latent.items()}
    return first, latent


def logit(first, latent, dense, known):
    """The teacher's logit with the terms of ids not ``known`` (n, 26 bool) set to 0."""
    out = dense + (first * known).sum(1)
    v, sq = 0.0, 0.0
    for f, vf in latent.items():
        vf = vf * known[:, f:f + 1]
        v, sq = v + vf, sq + (vf * vf).sum(1)
    return out + 0.5 * ((v * v).sum(1) - sq)


def replay(rows: int = 3_000_000, eval_rows: int = 100_000):
    """The generator's eval split as parts: ((ranks, cat_ok, first, latent, dense), label, seen),
    ``seen`` (eval rows, 26) the training count of each eval id (0 where unseen or missing)."""
    cfg = SyntheticConfig(rows=rows, eval_rows=eval_rows, skew=1.1, vocab=1_000_000)
    teacher = Teacher(cfg)
    rng = np.random.default_rng(cfg.seed + 2)
    train_ranks = []
    for start in range(0, cfg.rows, CHUNK):
        m = min(CHUNK, cfg.rows - start)
        ranks, cat_ok, *_ = parts(teacher, m, rng)
        rng.random(m)  # the labels' draw
        train_ranks.append(np.where(cat_ok, ranks, -1))
    train_ranks = np.concatenate(train_ranks)
    uniq = [np.unique(train_ranks[:, f], return_counts=True) for f in range(K.N_CAT)]
    del train_ranks
    ev = []
    for start in range(0, cfg.eval_rows, CHUNK):
        m = min(CHUNK, cfg.eval_rows - start)
        p = parts(teacher, m, rng)
        label = (rng.random(m) < 1 / (1 + np.exp(-logit(*p[2:], np.ones((m, K.N_CAT), bool))))).astype(np.int64)
        ev.append((p, label))
    p, label = ev[0] if len(ev) == 1 else _concat(ev)
    ranks, cat_ok = p[0], p[1]
    seen = np.zeros(ranks.shape, np.int64)
    for f in range(K.N_CAT):
        values, n = uniq[f]
        pos = np.clip(np.searchsorted(values, ranks[:, f]), 0, len(values) - 1)
        seen[:, f] = np.where((values[pos] == ranks[:, f]) & cat_ok[:, f], n[pos], 0)
    return teacher, p, label, seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--eval-rows", type=int, default=100_000)
    args = ap.parse_args()
    teacher, (ranks, cat_ok, first, latent, dense), label, seen = replay(args.rows, args.eval_rows)
    y = torch.from_numpy(label)
    report = {"rows": args.rows, "vocab": [int(v) for v in teacher.vocab], "pair_fields": [int(f) for f in teacher.pairs]}
    present = cat_ok.sum()
    for k in (0, 1, 2, 5, 10, 30, 100):
        known = seen >= k
        auc = float(binary_auroc(torch.from_numpy(logit(first, latent, dense, known)), y))
        report[f"auc_ids_seen_ge_{k}"] = auc
        report[f"share_of_eval_ids_seen_lt_{k}"] = float(((~known) & cat_ok).sum() / present)
    f_hat, l_hat = estimated(ranks, seen, first, latent)
    report["auc_bayes_estimates_from_counts"] = float(binary_auroc(
        torch.from_numpy(logit(f_hat, l_hat, dense, np.ones_like(seen, bool))), y))
    report["auc_dense_and_bias_only"] = float(binary_auroc(torch.from_numpy(dense), y))
    report["auc_first_order_only"] = float(binary_auroc(torch.from_numpy(dense + (first * (seen >= 1)).sum(1)), y))
    print(json.dumps(report, indent=1))


def _concat(ev):
    ps, labels = zip(*ev)
    ranks, cat_ok, first, latent, dense = zip(*ps)
    lat = {f: np.concatenate([d[f] for d in latent]) for f in latent[0]}
    return (np.concatenate(ranks), np.concatenate(cat_ok), np.concatenate(first), lat, np.concatenate(dense)), \
        np.concatenate(labels)


if __name__ == "__main__":
    main()
