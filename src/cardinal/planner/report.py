"""``cardinal plan RECIPE``: the planner's plan, each server's expected load beside the hash plan's."""

from cardinal.planner.propose import balance, describe, loads
from cardinal.planner.stats import TableStats
from cardinal.sharding.plan import ShardingPlan


def report(plan: ShardingPlan, stats: list[TableStats]) -> str:
    """Where each table goes, then per server: MB of rows, ids a step, requests a step, for this
    plan and the hash plan, and each column's busiest server over the mean."""
    n = plan.n_shards
    mine, hashed = loads(plan, stats), loads(ShardingPlan(n), stats)
    lines = [f"sharding plan for {n} servers, {len(stats)} tables:"]
    lines += ["  " + line for line in describe(plan, stats)]
    head = f"{'server':>8} | {'MB':>9} {'ids/step':>9} {'requests':>9} | {'hash MB':>9} {'ids/step':>9} {'requests':>9}"
    lines += ["", head, "-" * len(head)]
    keys = ("bytes", "ids", "requests")
    for s in range(n):
        a = [mine[k][s] for k in keys]
        b = [hashed[k][s] for k in keys]
        lines.append(f"{s:>8} | {a[0] / 1e6:>9.1f} {a[1]:>9.0f} {a[2]:>9.0f} | {b[0] / 1e6:>9.1f} {b[1]:>9.0f} {b[2]:>9.0f}")
    lines.append("-" * len(head))
    lines.append(f"{'max/mean':>8} | " + " ".join(f"{balance(mine[k]):>9.3f}" for k in keys) + " | "
                 + " ".join(f"{balance(hashed[k]):>9.3f}" for k in keys))
    lines.append(f"requests a step, all servers: {mine['requests'].sum():.0f} (hash plan: {hashed['requests'].sum():.0f})")
    return "\n".join(lines)
