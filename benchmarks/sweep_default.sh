#!/usr/bin/env bash
# The sweeps behind the default recipe's values (benchmarks/results/sweep.md), as run on a
# 16-core machine: eight settings at once, two threads each (about 17 minutes in all).
# Run from the repository root; the data set (3M rows, 782 MB) is generated once into data/.
#     bash benchmarks/sweep_default.sh && python benchmarks/sweep_table.py runs/sweep-*/
set -u
python -c "from cardinal.recipe import load; from cardinal.train.readers import ensure_synthetic; \
ensure_synthetic(load('criteo_synthetic', ['data.cache_dir=data']).data, False)"
# the recipe as it was before the sweep (batch 4096, adagrad lr 0.02, eval every 150 steps)
OLD="--set data.batch_size=4096 --set sparse_optimizer.lr=0.02 --set eval.every=150"
Z="--set sparse_optimizer.initial_accumulator=0.0"  # adagrad's, before the sweep (adam takes no such key)
S="--set data.cache_dir=data --out runs $OLD"
# 1: two epochs; the sparse optimizer and its lr (8 at once)
cardinal sweep $S $Z --parallel 8 --set train.epochs=2 \
  --grid sparse_optimizer.name=adagrad,rowwise_adagrad --grid sparse_optimizer.lr=0.02,0.05,0.1,0.2
# 2: two epochs; batch, dim, dense lr
cardinal sweep $S $Z --parallel 8 --set train.epochs=2 --set sparse_optimizer.name=adagrad --set sparse_optimizer.lr=0.02 \
  --grid data.batch_size=1024,4096 --grid embedding.dim=8,32 --grid dense_optimizer.lr=0.001,0.01
# 3-5: one epoch; four sweeps of two settings at once, two threads each
P="$S --set train.threads=2 --parallel 2"
AG="--set sparse_optimizer.name=adagrad $Z"
FT="--set sparse_optimizer.name=ftrl --set sparse_optimizer.beta=1e-4 --set sparse_optimizer.initial_accumulator=0.0"
B="--set data.batch_size=1024"
cardinal sweep $P $AG --grid sparse_optimizer.lr=0.005,0.01 &
cardinal sweep $P $AG --set sparse_optimizer.lr=0.02 --grid sparse_optimizer.initial_accumulator=1e-9,1e-8 &
cardinal sweep $P --set sparse_optimizer.name=adam --grid sparse_optimizer.lr=0.001,0.003 &
cardinal sweep $P $FT --set sparse_optimizer.lr=0.05 --grid sparse_optimizer.l2=1e-3,4e-3 &
wait
cardinal sweep $P $FT --set sparse_optimizer.lr=0.2 --grid sparse_optimizer.l2=1e-3,4e-3 &
cardinal sweep $P $AG --set sparse_optimizer.lr=0.02 --grid 'model.hidden=[64],[400,400,400]' &
cardinal sweep $P $AG --set sparse_optimizer.lr=0.02 --grid embedding.init_scale=0.001,0.05 &
cardinal sweep $P $AG --set sparse_optimizer.lr=0.02 --set data.batch_size=2048 --grid dense_optimizer.lr=0.001,0.01 &
wait
cardinal sweep $P $B $AG --grid sparse_optimizer.lr=0.01,0.02 &
cardinal sweep $P $B --set sparse_optimizer.name=adam --grid sparse_optimizer.lr=0.001,0.003 &
cardinal sweep $P $B $FT --set sparse_optimizer.lr=0.05 --grid sparse_optimizer.l2=4e-3,1.6e-2 &
cardinal sweep $P $B $AG --set sparse_optimizer.lr=0.02 --grid sparse_optimizer.initial_accumulator=1e-8,1e-7 &
wait
# 6: two epochs: does the second pass's loss come from the MLP, the dense lr, or unregularised rows?
E="--set train.epochs=2"
cardinal sweep $P $E $AG --set sparse_optimizer.lr=0.02 --grid 'model.hidden=[],[64]' &
cardinal sweep $P $E $FT --set sparse_optimizer.lr=0.05 --set 'model.hidden=[]' --grid sparse_optimizer.l2=0.004,0.016 &
cardinal sweep $P $E $FT --set sparse_optimizer.lr=0.05 --grid sparse_optimizer.l2=0.016,0.064 &
cardinal sweep $P $E $AG --set sparse_optimizer.lr=0.02 --grid dense_optimizer.lr=0.0001,0.0003 &
wait
# 7: one epoch, batch 1024
cardinal sweep $P $B $FT --set sparse_optimizer.lr=0.05 --grid sparse_optimizer.l2=0.064,0.25 &
cardinal sweep $P $B $FT --set sparse_optimizer.lr=0.1 --grid sparse_optimizer.l2=0.016,0.064 &
cardinal sweep $P $B $AG --set sparse_optimizer.lr=0.03 --grid sparse_optimizer.initial_accumulator=1e-7,1e-6 &
cardinal sweep $P $B $FT --set sparse_optimizer.lr=0.05 --set sparse_optimizer.l2=0.016 --grid 'model.hidden=[],[64]' &
wait
