"""What ``cardinal eval`` predicts for a checkpoint, example by example: what an export must serve."""

import numpy as np
import torch

from cardinal.train import Trainer


def eval_probabilities(recipe, step_path, tmp_path):
    """What `cardinal eval` computes for each eval example, as probabilities."""
    trainer = Trainer(recipe, tmp_path / "evaluator", progress=False)
    trainer.load(step_path)
    for m in trainer._modules():
        m.eval()
    out, batches = [], []
    with torch.no_grad():
        for batch in trainer.eval_data:
            emb, wide = trainer._embed(batch)
            out.append(torch.sigmoid(trainer.model(batch.dense, emb, wide)).numpy())
            batches.append(batch)
    trainer.close()
    return np.concatenate(out), batches
