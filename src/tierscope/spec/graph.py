"""A system's components and call graph, typed: what every reader of a run knows of its shape.

A :class:`Graph` is built from a spec's ``system.components`` (or from the three-tier
shorthand, the chain web -> app -> db) and written into ``run.json`` as ``components``; the
analysis, the models and the report read it back with :meth:`Graph.from_json`, so none of them
keeps a list of tier names or guesses an order.

Design decisions:

* Components are in **front-to-back order**: a topological order of the call graph from the
  entry, ties in the order the spec declares them; components the entry never reaches come
  last. For a chain this is the chain.
* *Downstream* of a component means its callees, their callees and so on (never a position in
  the order: two branches of a fan-out are not downstream of each other). Push-back and the
  root of an episode follow it.
* Expected visits per request entering the system follow the calls' probabilities and counts
  (``p`` x ``times`` along every path): the visit ratios of a queueing model of the graph.
* Cycles are refused where the graph is made (:func:`cycle`), naming the loop.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Component names: letters, digits, '-', '_' (they become folder, cgroup and column values).
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
#: Components of one system at most (their reach sets grow with the square of the count).
MAX_COMPONENTS = 1000
#: The three-tier shorthand's chain.
THREE_TIERS = ("web", "app", "db")


@dataclass(frozen=True)
class Call:
    """A call from a component to ``to``: made with probability ``p`` per visit, ``times``
    visits each time it is made."""

    to: str
    p: float = 1.0
    times: int = 1


@dataclass(frozen=True)
class Component:
    name: str
    replicas: int = 1
    cpu: float | None = None
    calls: tuple[Call, ...] = ()
    parallel: bool = False
    storage: bool = False


@dataclass(frozen=True)
class Graph:
    """Components front to back, their calls, and the entry (None: no load enters through a
    component tierscope knows). ``inferred``: the calls are not known but guessed from the order
    in which requests reach the components (a chain)."""

    components: tuple[Component, ...]
    entry: str | None = None
    inferred: bool = False
    _index: dict[str, int] = field(init=False, repr=False, compare=False)
    _down: dict[str, frozenset[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index = {c.name: i for i, c in enumerate(self.components)}
        down: dict[str, frozenset[str]] = {}
        for c in reversed(self.components):  # callees come after their callers
            reach: set[str] = set()
            for call in c.calls:
                reach |= {call.to} | down.get(call.to, frozenset())
            down[c.name] = frozenset(reach)
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_down", down)

    # ---- building ------------------------------------------------------------------------
    @classmethod
    def chain(cls, names: Sequence[str], replicas: Mapping[str, int] | None = None,
              cpu: Mapping[str, float | None] | None = None, *,
              inferred: bool = False) -> Graph:  # fmt: skip
        """``names[0]`` -> ``names[1]`` -> ...: the three-tier shorthand, or an order known
        without its calls (``inferred``)."""
        comps = tuple(
            Component(
                name=n,
                replicas=(replicas or {}).get(n, 1),
                cpu=(cpu or {}).get(n),
                calls=(Call(names[i + 1]),) if i + 1 < len(names) else (),
                storage=i == len(names) - 1 and tuple(names) == THREE_TIERS,
            )
            for i, n in enumerate(names)
        )
        return cls(comps, names[0] if names else None, inferred)

    @classmethod
    def build(cls, components: Sequence[Component], entry: str | None) -> Graph:
        """The graph of ``components`` (in declaration order) ordered front to back from
        ``entry``; ValueError for a cycle or a call to an unknown component."""
        by_name = {c.name: c for c in components}
        for c in components:
            for call in c.calls:
                if call.to not in by_name:
                    raise ValueError(f"{c.name} calls {call.to!r}, which is not a component")
        loop = cycle({c.name: [k.to for k in c.calls] for c in components})
        if loop:
            raise ValueError("the calls form a cycle: " + " -> ".join(loop))
        return cls(tuple(by_name[n] for n in _front_to_back(components, entry)), entry)

    # ---- reading ---------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [c.name for c in self.components]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __getitem__(self, name: str) -> Component:
        return self.components[self._index[name]]

    def position(self, name: str) -> int:
        """Front-to-back position (names not in the graph: after every component)."""
        return self._index.get(name, len(self.components))

    def downstream(self, name: str) -> frozenset[str]:
        """Every component that ``name``'s calls reach, directly or not."""
        return self._down.get(name, frozenset())

    def upstream(self, name: str) -> frozenset[str]:
        """Every component whose calls reach ``name``, directly or not."""
        return frozenset(c for c, down in self._down.items() if name in down)

    def callers(self, name: str) -> list[str]:
        """The components that call ``name``, front to back."""
        return [c.name for c in self.components if any(k.to == name for k in c.calls)]

    def depth(self, name: str) -> int:
        """Calls on the longest path from a component nobody calls to ``name`` (names not in
        the graph: deeper than every component)."""
        depth = {c.name: 0 for c in self.components}
        for c in self.components:
            for call in c.calls:
                depth[call.to] = max(depth[call.to], depth[c.name] + 1)
        return depth.get(name, len(self.components))

    def visits(self) -> dict[str, float]:
        """Expected visits to each component per request entering at the entry."""
        v = {c.name: 0.0 for c in self.components}
        if self.entry in v:
            v[self.entry] = 1.0
        for c in self.components:
            for call in c.calls:
                v[call.to] += v[c.name] * call.p * call.times
        return v

    def edges(self) -> list[tuple[str, str]]:
        return [(c.name, k.to) for c in self.components for k in c.calls]

    # ---- run.json --------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "entry": self.entry,
            "inferred": self.inferred,
            "order": self.names,
            "components": {
                c.name: {
                    "replicas": c.replicas,
                    "cpu": c.cpu,
                    "calls": [{"to": k.to, "p": k.p, "times": k.times} for k in c.calls],
                    "parallel": c.parallel,
                    "storage": c.storage,
                }
                for c in self.components
            },
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Graph:
        """The graph ``to_json`` wrote; ValueError when ``doc`` is not one."""
        try:
            comps = doc["components"]
            order = [str(n) for n in doc.get("order") or list(comps)]
            out = []
            for name in order:
                c = comps[name]
                out.append(
                    Component(
                        name=name,
                        replicas=int(c.get("replicas", 1)),
                        cpu=None if c.get("cpu") is None else float(c["cpu"]),
                        calls=tuple(
                            Call(str(k["to"]), float(k.get("p", 1.0)), int(k.get("times", 1)))
                            for k in c.get("calls", ())
                        ),
                        parallel=bool(c.get("parallel", False)),
                        storage=bool(c.get("storage", False)),
                    )
                )
            entry = doc.get("entry")
            built = cls.build(out, None if entry is None else str(entry))
            return cls(built.components, built.entry, bool(doc.get("inferred", False)))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a components document ({type(exc).__name__}: {exc})") from None


def cycle(calls: Mapping[str, Sequence[str]]) -> list[str]:
    """A loop of ``calls`` (name -> callees) as [a, b, ..., a], or [] when there is none
    (depth-first, without recursion: a chain may be as long as the graph)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in calls:
        if start in state:
            continue
        path: list[str] = [start]
        todo: list[Iterator[str]] = [iter(calls.get(start, ()))]
        state[start] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(calls.get(nxt, ())))
    return []


def _front_to_back(components: Sequence[Component], entry: str | None) -> list[str]:
    """Topological order from ``entry`` (ties in declaration order), then the components
    the entry does not reach, in the same way from each of their own roots."""
    names = [c.name for c in components]
    callees = {c.name: [k.to for k in c.calls] for c in components}
    indegree = dict.fromkeys(names, 0)
    for c in components:
        for k in dict.fromkeys(callees[c.name]):
            indegree[k] += 1
    reached: set[str] = set()
    todo = [entry] if entry in callees else []
    while todo:
        n = todo.pop()
        if n not in reached:
            reached.add(n)
            todo.extend(callees[n])
    rank = {n: (n not in reached, i) for i, n in enumerate(names)}
    ready = sorted((n for n in names if indegree[n] == 0), key=rank.__getitem__)
    out: list[str] = []
    while ready:
        n = ready.pop(0)
        out.append(n)
        for m in dict.fromkeys(callees[n]):
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
        ready.sort(key=rank.__getitem__)
    return out


__all__ = ["NAME", "THREE_TIERS", "Call", "Component", "Graph", "cycle"]
