"""Lazy L2 on the rows a push touches: the ``l2`` hyper-parameter of SGD, Adagrad, row-wise
Adagrad and Adam (FTRL has its own ``l1``/``l2`` in its closed form).

    g += l2 * w      (the gradient of (l2 / 2) ||w||^2), then the optimizer's own update

Only the rows a push touches are regularised, and only when they are touched, once per push
(TF's sparse apply and Paddle's sparse regularisation do the same; it is the "mini-batch aware
regularisation" of DIN, Zhou et al. 2018): a dense L2 over every row of a table of 10^8 rows
each step is neither affordable nor wanted, since the gradient of a row that is absent from
the batch is zero, not small.

The steps a row was not seen are *not* made up for (no ``(1 - lr l2)^k`` catch-up), because:
  - the row's metadata cannot tell them: ``last_step`` is set by the pull of the same step,
    so by the time its push arrives it no longer says when the row was last updated; a
    "last updated" column would be new per-row state in every checkpoint;
  - only SGD has a closed form for k skipped steps; Adagrad and Adam would need the
    accumulators' history;
  - the decay per sighting is what CTR practice wants: a rare id is shrunk when it speaks,
    not silenced for having been quiet (its few sightings would otherwise be erased).
So L2 acts per sighting, like the optimizer's state (``optim/base.py``: untouched rows do
not change). With several workers and ``consistency.<mode>.combine = true`` a step's pushes are
one update, so one decay; with ``combine = false`` each worker's push decays the row once. In
GEO mode the worker's replica applies the recipe's optimizer, L2 included, and the servers
add the resulting changes (``kind="delta"``) without a second decay. A counted push (``k``
updates a worker cache held and summed, ``optim/base.py``) is k sightings: ``g += k * l2 * w``,
the first-order term of k decays, measured from the row's value before them.

Cost when off: each kernel is compiled twice from one source, with and without the
``l2 * w`` term (``with_l2`` is a closure constant, so numba drops the dead branch); ``l2 = 0``
runs the variant without it, the inner loop of before.
"""

from collections.abc import Callable


def variants(factory: Callable[[bool], Callable]) -> Callable[[float], Callable]:
    """``factory(with_l2) -> kernel`` built both ways once; the returned function picks one by l2."""
    kernels = {False: factory(False), True: factory(True)}

    def pick(l2: float) -> Callable:
        return kernels[l2 != 0]
    return pick
