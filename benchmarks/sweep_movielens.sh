#!/usr/bin/env bash
# The sweeps behind the movielens recipe's values (benchmarks/results/sweep_movielens.md): about
# 15 minutes on 2 cores, two settings at once. Run from the repository root with the data set
# where `cardinal data movielens` puts it (or name a copy: ML=/path bash benchmarks/sweep_movielens.sh).
#     bash benchmarks/sweep_movielens.sh && python benchmarks/sweep_table.py runs/sweep-movielens-*/
set -u
ML=${ML:-$HOME/.cache/cardinal/data/movielens-latest-small}
# the recipe as it was before this sweep: dim 8, one shared table, sum pooling, Adagrad 0.02, batch 1024
OLD="--set embedding.dim=8 --set embedding.shared=true --set embedding.field_tables={} --set embedding.pooling=\"sum\" --set sparse_optimizer.lr=0.02 \
--set dense_optimizer.lr=0.001 --set data.batch_size=1024 --set ps.memory.admission.tables={}"
S="movielens --set data.train=\"$ML\" --out runs $OLD"
cardinal sweep $S --grid sparse_optimizer.lr=0.01,0.02
P="$S --parallel 2"
# 1: batch, sparse and dense lr; the model's size; a second and third epoch (early stopping, the best kept)
cardinal sweep $P --set eval.every=80 --grid data.batch_size=256,512 --grid sparse_optimizer.lr=0.01,0.03 --grid dense_optimizer.lr=0.001,0.003
cardinal sweep $P --grid 'model.hidden=[],[128,64]' --grid embedding.dim=4,16
cardinal sweep $P --set train.epochs=3 --grid sparse_optimizer.l2=0.0,0.001,0.01,0.1
cardinal sweep $P --grid model.dropout=0.2,0.5 --grid dense_optimizer.weight_decay=0.0,0.0001
cardinal sweep $P --set train.epochs=3 --grid sparse_optimizer.lr=0.05,0.1,0.2,0.4
# 2: 90% of the eval ratings come from users training never saw: a user-id row is a shortcut that
# training leans on and evaluation lacks. One table a field, and the user table admits no id
# (count admission past any user's ratings: every user id reads zeros); the movie's too
cardinal sweep $P --set embedding.shared=false --grid 'ps.memory.admission.tables={},{user={policy="count",threshold=1000000}},{user={policy="count",threshold=1000000},movie={policy="count",threshold=1000000}},{user={policy="count",threshold=100}}'
U="$P --set embedding.shared=false --set ps.memory.admission.tables={user={policy=\"count\",threshold=1000000}}"
cardinal sweep $U --grid 'model.hidden=[],[64]' --grid embedding.dim=8,16
cardinal sweep $U --set train.epochs=3 --grid sparse_optimizer.l2=0.0,0.001 --grid data.batch_size=512,1024
cardinal sweep $U --grid 'model.hidden=[],[64]' --grid embedding.dim=16,32 --grid embedding.pooling='"mean"' --grid sparse_optimizer.lr=0.01,0.02
M="$P --set embedding.shared=false --set embedding.pooling=\"mean\" --set sparse_optimizer.lr=0.01"
cardinal sweep $M --grid 'model.hidden=[64],[]' --grid embedding.dim=16,32 --grid 'ps.memory.admission.tables={user={policy="count",threshold=1000000},movie={policy="count",threshold=1000000}}'
B="$U --set embedding.pooling=\"mean\" --set sparse_optimizer.lr=0.01 --set embedding.dim=32 --set model.hidden=[64]"
cardinal sweep $B --grid train.seed=1,2,3 --grid train.epochs=1
cardinal sweep $B --grid dense_optimizer.lr=0.0005,0.002 --grid data.batch_size=512,1024
cardinal sweep $B --set dense_optimizer.lr=0.002 --set data.batch_size=512 --grid train.seed=1,2,3
