"""The default recipe shrunk to seconds, for runs in this process and for ``cardinal plan``; and
whether a key someone writes (``section.key=``) is one of a recipe's."""

from cardinal.recipe import load

FREE_FORM = {"model", "sparse_optimizer"}  # sections whose keys are the model's / optimizer's own arguments


def tiny_recipe(tmp_path, *extra):
    """3,000 generated rows (12 steps of 256), a small model, 4 embedded shards (so that the tests built on it
    cross shards). Later ``extra`` values override earlier ones."""
    return load(None, [f'data.cache_dir="{tmp_path / "data"}"', "ps.shards=4", "data.synthetic.rows=3000",
                       "data.synthetic.eval_rows=1000", "data.synthetic.vocab=300", "data.batch_size=256",
                       "data.eval_batch_size=1000", "model.hidden=[16]", "embedding.dim=4",
                       "metrics.log_every=2", *extra])


def plan_args(tmp_path, *extra) -> list[str]:
    """``cardinal plan`` over the tiny recipe's data, four shards."""
    sets = [f'data.cache_dir="{tmp_path / "data"}"', "data.synthetic.rows=3000", "data.synthetic.eval_rows=1000",
            "data.synthetic.vocab=300", "data.batch_size=256", "embedding.dim=4", "embedding.shared=false",
            "ps.shards=4", *extra]
    return ["plan", *sum((["--set", s] for s in sets), [])]


def unknown(key: str, recipe: dict) -> bool:
    """Whether ``key`` (dotted) is not a key of ``recipe`` (``Recipe.to_dict()``)."""
    node = recipe
    for i, part in enumerate(key.split(".")):
        if i == 1 and key.split(".")[0] in FREE_FORM:
            return False
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False
