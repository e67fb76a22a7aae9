"""GetPreferredAllocation for GPUs: pack by NUMA node first, then by NVML topology (closest pairs).

Cost of a candidate set, compared lexicographically (lower is better):
  1. the number of distinct NUMA nodes it spans (GPUs without NUMA affinity count as one group),
  2. the sum of pairwise nvmlDeviceGetTopologyCommonAncestor levels (INTERNAL 0 < SINGLE 10 <
     MULTIPLE 20 < HOSTBRIDGE 30 < NODE 40 < SYSTEM 50),
  3. best fit: how many available GPUs are left on the NUMA nodes it uses (keep whole nodes free),
  4. the GPU indexes (deterministic answers).
Exhaustive over all completions when that is cheap, greedy otherwise.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterable, Sequence

EXHAUSTIVE_LIMIT = 5000
FAR = 50  # NVML_TOPOLOGY_SYSTEM


class Topology:
    def __init__(self, numa: dict[str, int | None], index: dict[str, int],
                 levels: dict[tuple[str, str], int]):
        self.numa = numa
        self.index = index
        self.levels = levels

    def level(self, a: str, b: str) -> int:
        return 0 if a == b else self.levels.get((a, b), FAR)


def _cost(chosen: Sequence[str], available: Sequence[str], topo: Topology) -> tuple:
    nodes = {topo.numa.get(d) for d in chosen}
    level_sum = sum(topo.level(a, b) for a, b in itertools.combinations(chosen, 2))
    chosen_set = set(chosen)
    leftover = sum(1 for d in available if d not in chosen_set and topo.numa.get(d) in nodes)
    return (len(nodes), level_sum, leftover, sorted(topo.index.get(d, 1 << 30) for d in chosen))


def preferred(available: Iterable[str], must_include: Iterable[str], size: int, topo: Topology) -> list[str]:
    """The preferred `size` device IDs from `available`, always containing `must_include`."""
    available = list(dict.fromkeys(available))
    must = [d for d in dict.fromkeys(must_include)]
    if size <= len(must):
        return must
    candidates = [d for d in available if d not in set(must)]
    need = size - len(must)
    if need >= len(candidates):
        return must + candidates
    if math.comb(len(candidates), need) <= EXHAUSTIVE_LIMIT:
        best = min(itertools.combinations(candidates, need),
                   key=lambda extra: _cost(must + list(extra), available, topo))
        chosen = must + list(best)
    else:
        chosen = list(must)
        pool = _greedy_pool(must, candidates, need, topo)
        while len(chosen) < size:
            nxt = min(pool, key=lambda d: _cost(chosen + [d], available, topo))
            chosen.append(nxt)
            pool.remove(nxt)
    return sorted(chosen, key=lambda d: (d not in must, topo.index.get(d, 1 << 30)))


def _greedy_pool(must: list[str], candidates: list[str], need: int, topo: Topology) -> list[str]:
    """For the greedy path: the candidates of one NUMA node that can hold the whole remainder (the
    must-include GPUs' node first, else the smallest that fits), or all candidates if none can."""
    by_node: dict[int | None, list[str]] = {}
    for d in candidates:
        by_node.setdefault(topo.numa.get(d), []).append(d)
    must_nodes = {topo.numa.get(d) for d in must}
    fitting = [n for n, ds in by_node.items() if len(ds) >= need and (not must_nodes or n in must_nodes)]
    if fitting:
        return list(by_node[min(fitting, key=lambda n: len(by_node[n]))])
    return list(candidates)
