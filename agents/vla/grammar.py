"""Prefix validity of the action language (grammar v1), for grammar-constrained decoding.

Each level of :mod:`agents.vla.action_language` gets a character-level automaton (:class:`CharGrammar`) for a
*canonical subset* of what its strict decoder accepts, so every complete string is parseable:

* ``chunk``: ``[[dx, dy, dz, g], ...]`` with 1..``max_elements`` elements, numbers ``-?D{1,2}.D`` (one decimal
  as :func:`~agents.vla.action_language.format_chunk` writes them), ``g`` 0 or 1, one optional space after commas;
* ``motion``: the finite set of direction-only plans :func:`~agents.vla.action_language.check_motion` accepts
  (each axis named at most once);
* ``subtasks``: 1..12 items of ``[a-z0-9][a-z0-9' -]{0,79}`` separated by ``;`` + an optional space.

A leading space is allowed (byte-level tokenizers often start a continuation with one). :meth:`CharGrammar.state`
says whether a text is a valid prefix, whether it is complete, and how many characters at least complete it
(``distance``); :mod:`agents.vla.constrained` turns that into allowed tokens per generation step.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from agents.vla.action_language import AXES, MAX_SUBTASKS, ChunkLimits


# ------------------------------------------------------------------------------------------------ NFA builder
@dataclass
class _NFA:
    """Thompson NFA: node -> epsilon targets and (charset, target) edges; one start, one accept node."""

    eps: list[list[int]] = field(default_factory=list)
    edges: list[list[tuple[frozenset[str], int]]] = field(default_factory=list)

    def node(self) -> int:
        self.eps.append([])
        self.edges.append([])
        return len(self.eps) - 1


# pattern AST: ("lit", str) | ("set", chars) | ("seq", parts) | ("alt", parts) | ("rep", part, lo, hi)
def lit(s: str) -> tuple:
    return ("lit", s)


def chars(s: str) -> tuple:
    return ("set", frozenset(s))


def seq(*parts: tuple) -> tuple:
    return ("seq", parts)


def alt(*parts: tuple) -> tuple:
    return ("alt", parts)


def rep(part: tuple, lo: int, hi: int) -> tuple:
    return ("rep", part, lo, hi)


def opt(part: tuple) -> tuple:
    return rep(part, 0, 1)


def _build(nfa: _NFA, p: tuple, start: int) -> int:
    """Add pattern ``p`` starting at node ``start``; returns its end node."""
    kind = p[0]
    if kind == "lit":
        cur = start
        for ch in p[1]:
            nxt = nfa.node()
            nfa.edges[cur].append((frozenset(ch), nxt))
            cur = nxt
        return cur
    if kind == "set":
        end = nfa.node()
        nfa.edges[start].append((p[1], end))
        return end
    if kind == "seq":
        cur = start
        for part in p[1]:
            cur = _build(nfa, part, cur)
        return cur
    if kind == "alt":
        end = nfa.node()
        for part in p[1]:
            s = nfa.node()
            nfa.eps[start].append(s)
            nfa.eps[_build(nfa, part, s)].append(end)
        return end
    if kind == "rep":
        _, part, lo, hi = p
        end = nfa.node()
        cur = start
        for i in range(hi):
            if i >= lo:
                nfa.eps[cur].append(end)
            cur = _build(nfa, part, cur)
        nfa.eps[cur].append(end)
        return end
    raise ValueError(f"unknown pattern node {kind!r}")


@dataclass(frozen=True)
class PrefixState:
    """Where a text stands in a grammar: ``valid`` prefix, ``complete`` (a full sentence), and ``distance`` (the
    fewest characters that complete it; 0 when complete, a large number when not valid)."""

    nodes: frozenset[int]
    valid: bool
    complete: bool
    distance: int


class CharGrammar:
    """A character-level automaton over a pattern (see the module docstring); transitions are memoised, so it
    behaves like a lazily built DFA."""

    INVALID = 10**9

    def __init__(self, pattern: tuple, name: str = "") -> None:
        self.name = name
        nfa = _NFA()
        start = nfa.node()
        self.accept = _build(nfa, pattern, start)
        self._nfa = nfa
        n = len(nfa.eps)
        self._closure = [self._eps_closure(i) for i in range(n)]
        self._dist = self._distances()
        self.alphabet = frozenset().union(*(cs for es in nfa.edges for cs, _ in es))
        self._step: dict[tuple[frozenset[int], str], frozenset[int]] = {}
        self._sorted_alphabet = sorted(self.alphabet)
        self._completion: dict[frozenset[int], str] = {}
        self.start = self._make(self._closure[start])

    def _eps_closure(self, i: int) -> frozenset[int]:
        seen, todo = {i}, [i]
        while todo:
            for j in self._nfa.eps[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return frozenset(seen)

    def _distances(self) -> list[int]:
        """Fewest characters from each node to the accept node (0-1 BFS on the reversed graph)."""
        from collections import deque

        n = len(self._nfa.eps)
        rev: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for a in range(n):
            for b in self._nfa.eps[a]:
                rev[b].append((a, 0))
            for _, b in self._nfa.edges[a]:
                rev[b].append((a, 1))
        dist = [self.INVALID] * n
        dist[self.accept] = 0
        dq = deque([self.accept])
        while dq:
            b = dq.popleft()
            for a, w in rev[b]:
                if dist[b] + w < dist[a]:
                    dist[a] = dist[b] + w
                    (dq.appendleft if w == 0 else dq.append)(a)
        return dist

    def _make(self, nodes: frozenset[int]) -> PrefixState:
        if not nodes:
            return PrefixState(nodes, False, False, self.INVALID)
        return PrefixState(nodes, True, self.accept in nodes, min(self._dist[i] for i in nodes))

    def _advance_nodes(self, nodes: frozenset[int], ch: str) -> frozenset[int]:
        key = (nodes, ch)
        out = self._step.get(key)
        if out is None:
            nxt: set[int] = set()
            for i in nodes:
                for cs, j in self._nfa.edges[i]:
                    if ch in cs:
                        nxt |= self._closure[j]
            out = frozenset(nxt)
            if len(self._step) < 200_000:
                self._step[key] = out
        return out

    def advance(self, state: PrefixState, text: str) -> PrefixState:
        """The state after reading ``text`` from ``state`` (invalid stays invalid)."""
        nodes = state.nodes
        for ch in text:
            if not nodes:
                break
            nodes = self._advance_nodes(nodes, ch)
        return self._make(nodes)

    def state(self, text: str) -> PrefixState:
        return self.advance(self.start, text)

    def is_prefix(self, text: str) -> bool:
        return self.state(text).valid

    def is_complete(self, text: str) -> bool:
        return self.state(text).complete

    def shortest_completion(self, text: str) -> str | None:
        """The shortest string that completes ``text`` (None when ``text`` is not a valid prefix)."""
        st = self.state(text)
        return self.completion(st) if st.valid else None

    def completion(self, state: PrefixState) -> str:
        """The shortest string that completes a valid ``state`` (ties: the smallest character first).

        Suffix-consistent: reading any prefix of it leads to a state whose completion is the rest of it."""
        if not state.valid:
            raise ValueError("no completion for an invalid prefix")
        out = self._completion.get(state.nodes)
        if out is None:
            chars, st = [], state
            while not st.complete:
                st, ch = min(((self.advance(st, c), c) for c in self._sorted_alphabet), key=lambda sc: sc[0].distance)
                chars.append(ch)
            out = "".join(chars)
            if len(self._completion) < 100_000:
                self._completion[state.nodes] = out
        return out


# ------------------------------------------------------------------------------------------------ the three levels
_LEAD = opt(lit(" "))
_DIGIT = chars("0123456789")
_NUMBER = seq(opt(lit("-")), _DIGIT, opt(_DIGIT), lit("."), _DIGIT)
_COMMA = seq(lit(","), opt(lit(" ")))


def motion_sentences() -> list[str]:
    """Every motion plan of grammar v1 (each axis at most once, in any order; finite)."""
    words = [(w, a) for a, pair in enumerate(AXES) for w in pair]
    moves: list[str] = []
    for k in (1, 2, 3):
        for combo in itertools.permutations(words, k):
            if len({a for _, a in combo}) < k:
                continue
            for slight in itertools.product(("", "slightly "), repeat=k):
                moves.append("move " + " and ".join(s + w for s, (w, _) in zip(slight, combo)))
    bases = ["stay still", *moves]
    grips = [", then close the gripper", ", then open the gripper"]
    return [*bases, *(b + g for b in bases for g in grips), "close the gripper", "open the gripper"]


def _trie_pattern(words: Iterable[str]) -> tuple:
    """An alternation of ``words`` factored as a trie (keeps the automaton small)."""
    tree: dict = {}
    for w in words:
        node = tree
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> tuple:
        branches = [lit("") if ch == "" else seq(lit(ch), build(sub)) for ch, sub in sorted(node.items())]
        return branches[0] if len(branches) == 1 else alt(*branches)

    return build(tree)


@lru_cache(maxsize=16)
def chunk_grammar(max_elements: int = 16) -> CharGrammar:
    ChunkLimits(max_elements=max_elements)  # validates
    elem = seq(lit("["), _NUMBER, _COMMA, _NUMBER, _COMMA, _NUMBER, _COMMA, chars("01"), lit("]"))
    return CharGrammar(seq(_LEAD, lit("["), elem, rep(seq(_COMMA, elem), 0, max_elements - 1), lit("]")), "chunk")


@lru_cache(maxsize=1)
def motion_grammar() -> CharGrammar:
    return CharGrammar(seq(_LEAD, _trie_pattern(motion_sentences())), "motion")


@lru_cache(maxsize=1)
def subtasks_grammar() -> CharGrammar:
    first = "abcdefghijklmnopqrstuvwxyz0123456789"
    item = seq(chars(first), rep(chars(first + "' -"), 0, 79))
    sep = seq(lit(";"), opt(lit(" ")))
    return CharGrammar(seq(_LEAD, item, rep(seq(sep, item), 0, MAX_SUBTASKS - 1)), "subtasks")


def level_grammar(level: str, max_elements: int = 16) -> CharGrammar:
    """The grammar of ``level``: ``subtasks``, ``motion`` or ``chunk``."""
    if level == "chunk":
        return chunk_grammar(max_elements)
    if level == "motion":
        return motion_grammar()
    if level == "subtasks":
        return subtasks_grammar()
    raise ValueError(f"level must be 'subtasks', 'motion' or 'chunk', got {level!r}")
