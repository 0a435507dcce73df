"""Synthetic Criteo-layout data with a planted teacher, so that AUC means something.

Each of the 26 categorical fields draws ids from a Zipf law (exponent ``skew``) over its
own vocabulary (10 ... ``vocab`` ids, log-spaced across fields); values are 32-bit hashes
written as 8 hex digits. The 13 integer fields are heavy-tailed counts (field I2 goes
negative, as in Criteo). Values go missing at rate ``missing``.

The label is drawn from a logistic teacher:
    logit = b + sum_f w_f[id_f]                       first order, every field
              + sum_{f<g in PAIRS} <v_f[id_f], v_g[id_g]>   second order, 10 fields (FM-style)
              + sum_d a_d * log1p(max(I_d, 0))        dense
with every weight derived from a hash of (seed, field, id), so nothing is stored, and b set
for a click rate near 25%. ``teacher.json`` holds the teacher's AUC and logloss on the eval
split: the best any model can do.
"""

import json
import math
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from torchmetrics.functional.classification import binary_auroc

from cardinal.data import tsv_kernels as K
from cardinal.data.synthetic_config import SyntheticConfig

PAIR_FIELDS = 10
LATENT = 4
CHUNK = 100_000


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 over a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _hash(seed: int, field: int, rank: np.ndarray, salt: int) -> np.ndarray:
    key = np.uint64((int(seed) * 1_000_003 + int(field) * 7919 + int(salt) * 104_729) & (2**64 - 1))
    return _mix(_mix(rank.astype(np.uint64) ^ key))


def _gauss(h: np.ndarray) -> np.ndarray:
    """Approximately standard normal from a 64-bit hash (sum of four 16-bit uniforms)."""
    parts = [((h >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.float64) / 65536.0 for k in range(4)]
    return (sum(parts) - 2.0) * math.sqrt(3.0)


class Teacher:
    """``first_order`` and ``latent`` scale the weights (the spread of each id's weight and of each
    of its latent values): the defaults are the shipped data's; a benchmark may plant a teacher
    of another strength (benchmarks/criteo_layout.py)."""

    def __init__(self, cfg: SyntheticConfig, first_order: float = 0.25, latent: float = 0.35):
        self.cfg = cfg
        self.first_order, self.latent = first_order, latent
        rng = np.random.default_rng(cfg.seed)
        sizes = np.round(10 ** np.linspace(1, math.log10(cfg.vocab), K.N_CAT)).astype(np.int64)
        self.vocab = rng.permutation(sizes)
        self.dense_mu = rng.uniform(0.5, 3.0, K.N_INT)
        self.dense_w = np.where(np.arange(K.N_INT) < 6, rng.normal(0, 0.25, K.N_INT), 0.0)
        self.pairs = rng.choice(K.N_CAT, PAIR_FIELDS, replace=False)
        self.bias = 0.0
        calib = self.sample(20_000, np.random.default_rng(cfg.seed + 1))[1]
        self.bias = _bias_for_rate(calib, 0.25)

    def sample(self, n: int, rng: np.random.Generator):
        """(arrays for the TSV formatter, teacher logits) for ``n`` rows."""
        cfg = self.cfg
        ranks = np.stack([(rng.zipf(cfg.skew, n) - 1) % v for v in self.vocab], 1)
        cat_ok = rng.random((n, K.N_CAT)) >= cfg.missing
        cats = np.stack([_hash(cfg.seed, f, ranks[:, f], 0) & np.uint64(0xFFFFFFFF) for f in range(K.N_CAT)], 1)
        ints = np.floor(np.exp(rng.normal(self.dense_mu, 1.0, (n, K.N_INT)))).astype(np.int64)
        ints[:, 1] -= 3  # I2 goes negative, as in Criteo
        int_ok = rng.random((n, K.N_INT)) >= cfg.missing
        logit = np.full(n, self.bias)
        for f in range(K.N_CAT):
            logit += self.first_order * _gauss(_hash(cfg.seed, f, ranks[:, f], 1)) * cat_ok[:, f]
        v = np.zeros((n, LATENT))
        sq = np.zeros(n)
        for f in self.pairs:
            vf = np.stack([_gauss(_hash(cfg.seed, f, ranks[:, f], 2 + k)) for k in range(LATENT)], 1)
            vf *= self.latent * cat_ok[:, f:f + 1]
            v += vf
            sq += (vf * vf).sum(1)
        logit += 0.5 * ((v * v).sum(1) - sq)
        logit += (np.log1p(np.maximum(ints, 0)) * int_ok) @ self.dense_w
        return (cats.astype(np.int64), cat_ok, ints, int_ok), logit


def _bias_for_rate(logit: np.ndarray, rate: float) -> float:
    lo, hi = -20.0, 20.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (1 / (1 + np.exp(-(logit + mid)))).mean() > rate:
            hi = mid
        else:
            lo = mid
    return (lo + hi) / 2


def generate(out_dir: str | Path, cfg: SyntheticConfig, progress=None, teacher: Teacher | None = None) -> dict:
    """Write ``train.tsv``, ``eval.tsv`` and ``teacher.json`` into ``out_dir``; returns the teacher's
    figures. ``teacher``: one of another strength (default: ``Teacher(cfg)``)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    teacher = teacher or Teacher(cfg)
    rng = np.random.default_rng(cfg.seed + 2)
    report = {"config": asdict(cfg)}
    for split, n in (("train", cfg.rows), ("eval", cfg.eval_rows)):
        logits, labels = [], []
        tmp = out_dir / f"{split}.tsv.partial"
        with open(tmp, "wb") as f:
            for start in range(0, n, CHUNK):
                m = min(CHUNK, n - start)
                (cats, cat_ok, ints, int_ok), logit = teacher.sample(m, rng)
                label = (rng.random(m) < 1 / (1 + np.exp(-logit))).astype(np.int64)
                buf = np.empty(m * (2 + K.N_INT * 21 + K.N_CAT * 9), np.uint8)
                size = K.format_lines(label, ints, int_ok, cats, cat_ok, buf)
                f.write(buf[:size].tobytes())
                logits.append(logit)
                labels.append(label)
                if progress:
                    progress(m)
        tmp.rename(out_dir / f"{split}.tsv")
        logit, label = np.concatenate(logits), np.concatenate(labels)
        p = np.clip(1 / (1 + np.exp(-logit)), 1e-7, 1 - 1e-7)
        report[split] = {"rows": n, "click_rate": float(label.mean()),
                         "teacher_auc": float(binary_auroc(torch.from_numpy(logit), torch.from_numpy(label))),
                         "teacher_logloss": float(-(label * np.log(p) + (1 - label) * np.log(1 - p)).mean())}
    (out_dir / "teacher.json").write_text(json.dumps(report, indent=1))
    return report
