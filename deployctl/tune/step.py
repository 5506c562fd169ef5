"""The smart search (pure): not the full grid. Start from the spec's own point and the rules' minimum, then move from
the last measured candidate along the axis its bench says binds, each move with its reason; else try the untried
neighbours of the best so far; a budget (candidates or seconds) stops it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from deployctl.tune.result import BINDINGS, rank
from deployctl.tune.space import BATCHED, LAYOUT, SEQS, Candidate, Space


@dataclass(frozen=True)
class Budget:
    candidates: Optional[int] = None  # measured candidates at most
    seconds: Optional[float] = None  # wall time of the tune at most (checked before each candidate)


@dataclass(frozen=True)
class Step:
    candidate: Optional[Candidate]
    reason: str  # why it is tried, or why the search stopped


# per binding, the moves worth trying, in order: (axis, direction, what it buys)
MOVES = {
    "kv_cache": ((SEQS, -1, "fewer seqs"), (LAYOUT, +1, "more cards")),
    "queue": ((SEQS, +1, "more seqs"), (LAYOUT, +1, "more cards")),
    "ttft": (("prefill", +1, "more prefill"), (BATCHED, -1, "smaller batched tokens")),
    "tpot": ((SEQS, -1, "fewer seqs"), (LAYOUT, +1, "more cards")),
    "none": ((LAYOUT, -1, "fewer cards"), (SEQS, +1, "more seqs")),
    "unknown": (),
}


def next_step(space: Space, records: Mapping[Candidate, dict], order: list[Candidate], budget: Budget,
              elapsed_s: float = 0.0) -> Step:
    """The next candidate to measure given those measured (`order`: in the order they ran), or why to stop."""
    tried = set(order)
    done = [c for c in order if records.get(c, {}).get("status") == "measured"]
    if budget.candidates is not None and len(order) >= budget.candidates:
        return Step(None, f"budget spent: {budget.candidates} candidate(s)")
    if budget.seconds is not None and elapsed_s >= budget.seconds:
        return Step(None, f"budget spent: {budget.seconds:g} s")
    if not space.texts:
        return Step(None, "no candidate passes the spec's rules")
    if space.original is not None and space.original not in tried:
        return Step(space.original, "the spec's own layout and values")
    minimum = _rules_minimum(space)
    if minimum is not None and minimum not in tried:
        return Step(minimum, f"the rules' minimum: the fewest cards ({space.cards[minimum]}) that validate accepts")
    if order:
        last = order[-1]
        record = records.get(last, {})
        bound = record.get("binding", "unknown") if record.get("status") == "measured" else "unknown"
        for axis, direction, buys in MOVES.get(bound, ()):
            moved = _move(space, last, axis, direction)
            if moved is not None and moved not in tried:
                return Step(moved, f"after {last.label}: {BINDINGS[bound]}: {buys}")
    best = next((c for c in _ranked(records, done)), None) or (order[0] if order else None)
    base = best or space.original or space.valid[0]
    for axis in space.axes:
        for direction in (+1, -1):
            moved = _move(space, base, axis.key, direction)
            if moved is not None and moved not in tried:
                what = "the best so far" if best is not None else "the first candidate"
                return Step(moved, f"a neighbour of {what} ({base.label}) along {_axis_name(axis.key)}")
    if base not in tried:
        return Step(base, "the first candidate the rules accept")
    return Step(None, "every neighbour of the best candidate was tried")


def grid_step(space: Space, order: list[Candidate], budget: Budget, elapsed_s: float = 0.0) -> Step:
    """`--grid`: every candidate the rules accept, in grid order, within the budget (what the search is measured
    against)."""
    if budget.candidates is not None and len(order) >= budget.candidates:
        return Step(None, f"budget spent: {budget.candidates} candidate(s)")
    if budget.seconds is not None and elapsed_s >= budget.seconds:
        return Step(None, f"budget spent: {budget.seconds:g} s")
    tried = set(order)
    untried = [c for c in space.valid if c not in tried]
    if not untried:
        return Step(None, "the full grid was tried" if space.texts else "no candidate passes the spec's rules")
    return Step(untried[0], f"the full grid (--grid): {len(space.valid) - len(untried) + 1} of {len(space.valid)}")


def _ranked(records: Mapping[Candidate, dict], done: list[Candidate]) -> list[Candidate]:
    by_label = {records[c]["label"]: c for c in done}
    return [by_label[r["label"]] for r in rank([records[c] for c in done])]


def _rules_minimum(space: Space) -> Optional[Candidate]:
    """The valid candidate with the fewest cards whose other values are the spec's own point's (when known)."""
    pool = space.valid
    if space.original is not None:
        others = [v for v in space.original.values if v[0] != LAYOUT]
        same = [c for c in pool if [v for v in c.values if v[0] != LAYOUT] == others]
        pool = same or pool
    return min(pool, key=lambda c: (space.cards[c], pool.index(c))) if pool else None


def _axis_name(key: str) -> str:
    return {LAYOUT: "the layout", SEQS: "max_num_seqs", BATCHED: "max_num_batched_tokens"}.get(key, key)


def _move(space: Space, base: Candidate, axis: str, direction: int) -> Optional[Candidate]:
    """The nearest valid candidate one step along `axis` from `base`, everything else equal; on the layout axis,
    "up" and "down" mean more and fewer cards ("prefill": a P/D layout with more prefill cards)."""
    values = dict(base.values)
    if axis == "prefill":
        return _more_prefill(space, base)
    if axis not in values:
        return None
    if axis == LAYOUT:
        now = space.cards[base]
        options = [c for c in space.valid if _same_except(c, base, LAYOUT)
                   and (space.cards[c] - now) * direction > 0]
        return min(options, key=lambda c: (abs(space.cards[c] - now), c.layout.roles)) if options else None
    axis_values = next(a.values for a in space.axes if a.key == axis)
    index = axis_values.index(values[axis]) + direction
    while 0 <= index < len(axis_values):
        moved = Candidate(tuple((k, axis_values[index] if k == axis else v) for k, v in base.values))
        if moved in space.texts:
            return moved
        index += direction
    return None


def _more_prefill(space: Space, base: Candidate) -> Optional[Candidate]:
    layout = base.layout
    if layout is None or len(layout.roles) < 2:
        return None
    share = _prefill_cards(layout)
    options = [c for c in space.valid if _same_except(c, base, LAYOUT) and _prefill_cards(c.layout) > share
               and c.layout.cards <= layout.cards]
    return min(options, key=lambda c: (_prefill_cards(c.layout), c.layout.roles)) if options else None


def _prefill_cards(layout) -> int:
    return sum(tp * dp for role, tp, dp in layout.roles if role == "prefill")


def _same_except(a: Candidate, b: Candidate, axis: str) -> bool:
    return [v for v in a.values if v[0] != axis] == [v for v in b.values if v[0] != axis]
