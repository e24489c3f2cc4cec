"""Grammar-constrained decoding: at each generation step only tokens that keep the decoded text a valid prefix of
the level's grammar (:mod:`agents.vla.grammar`) are allowed, and end-of-sequence only once the text is complete.

Budget-aware: a token is allowed only if the text can still be completed in the tokens left (``max_new_tokens``),
counted by :class:`TokenBudget` as the tokens of the grammar's shortest completion split greedily into the
vocabulary's pieces (an upper bound that stays true token by token). With single-character tokens in the vocabulary
(true of byte-level BPEs) a constrained generation always ends as a complete, parseable string. The bound follows one
completion (the shortest in characters), so a model's own text that fits the budget is allowed whenever it needs no
fewer tokens than that split (the canonical texts do; tested), not in every case; counting characters, as before
2026-12-04, forbade ``close`` with 11 tokens left although `` the gripper`` needs 2.
Used through ``model.generate(prefix_allowed_tokens_fn=...)`` (applied before temperature / top-p, so sampling only
ever sees allowed tokens). The strict decoders stay as they
are: constrained text is a subset of what they accept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from agents.vla.grammar import CharGrammar, PrefixState, level_grammar

#: levels a constraint can be built for
LEVELS = ("subtasks", "motion", "chunk")


def token_pieces(tokenizer: Any) -> dict[int, str]:
    """Token id -> the text it appends when decoded after other tokens (special tokens left out).

    Computed as ``decode([anchor, t])`` minus ``decode([anchor])`` so SentencePiece-style leading-space handling
    matches mid-sequence decoding; tokens whose text does not extend the anchor's are left out.
    """
    special = set(tokenizer.all_special_ids)
    anchor = tokenizer("a", add_special_tokens=False)["input_ids"][0]
    head = tokenizer.decode([anchor])
    ids = [i for i in range(len(tokenizer)) if i not in special]
    texts = tokenizer.batch_decode([[anchor, i] for i in ids])
    out = {}
    for i, t in zip(ids, texts, strict=True):
        if t.startswith(head) and len(t) > len(head):
            out[i] = t[len(head):]
    return out


class TokenBudget:
    """Upper bound on the tokens that complete a grammar state: the grammar's shortest completion
    (:meth:`CharGrammar.completion`) split greedily into the longest available pieces, or its length in characters
    when that is smaller. Both bounds hold again after taking the first token of their own split, so a token allowed
    under the bound can always be followed to a complete text within the budget. Memoised per state."""

    def __init__(self, grammar: CharGrammar, pieces: Sequence[str]) -> None:
        self.grammar = grammar
        self.pieces = frozenset(p for p in pieces if p)
        self.longest = max((len(p) for p in self.pieces), default=0)
        self._memo: dict[frozenset[int], int] = {}

    def split(self, text: str) -> int | None:
        """Tokens of the greedy longest-piece split of ``text`` (None when a character has no piece)."""
        i, n = 0, 0
        while i < len(text):
            for k in range(min(self.longest, len(text) - i), 0, -1):
                if text[i:i + k] in self.pieces:
                    i, n = i + k, n + 1
                    break
            else:
                return None
        return n

    def tokens(self, state: PrefixState) -> int:
        """Fewest tokens known to complete ``state`` (``state.distance`` when no split is shorter)."""
        if not state.valid:
            return CharGrammar.INVALID
        got = self._memo.get(state.nodes)
        if got is None:
            n = self.split(self.grammar.completion(state))
            got = state.distance if n is None else min(n, state.distance)
            if len(self._memo) < 100_000:
                self._memo[state.nodes] = got
        return got


class GrammarConstraint:
    """A ``prefix_allowed_tokens_fn`` for one generation call (it remembers the prompt length of its first call,
    so build a fresh one per ``generate``; :meth:`Constrainer.constraint` does).

    ``pieces``: candidate token id -> text piece; ``text_of``: generated ids -> decoded text; ``eos_id``: allowed
    once the text is complete; ``max_new_tokens``: the generation budget; ``budget``: a :class:`TokenBudget` over the
    same pieces (built when not given; pass one to share its memo across generations).
    """

    def __init__(self, grammar: CharGrammar, pieces: dict[int, str], text_of: Callable[[Sequence[int]], str],
                 eos_id: int, max_new_tokens: int, skip_ids: Sequence[int] = (),
                 budget: TokenBudget | None = None) -> None:
        self.grammar, self.text_of, self.eos_id = grammar, text_of, int(eos_id)
        self.max_new_tokens = int(max_new_tokens)
        self.pieces = [(i, p) for i, p in pieces.items() if p and set(p) <= grammar.alphabet]
        self.budget = budget if budget is not None else TokenBudget(grammar, [p for _, p in self.pieces])
        self.skip = set(skip_ids)
        self._n_prefix: int | None = None

    def allowed(self, new_ids: Sequence[int]) -> list[int]:
        """Allowed next tokens after the generated ``new_ids`` (never empty: end-of-sequence as a last resort)."""
        st = self.grammar.state(self.text_of([i for i in new_ids if i not in self.skip]))
        if not st.valid:
            return [self.eos_id]
        left = self.max_new_tokens - len(new_ids) - 1  # tokens left after the next one
        out, fallback = ([self.eos_id] if st.complete else []), []
        for tid, piece in self.pieces:
            nxt = self.grammar.advance(st, piece)
            if nxt.valid:
                fits = nxt.distance <= left or self.budget.tokens(nxt) <= left
                (out if fits else fallback).append(tid)
        # over budget (a vocabulary without single-character tokens): best effort, any valid continuation
        return out or fallback or [self.eos_id]

    def __call__(self, batch_id: int, input_ids: Any) -> list[int]:
        ids = input_ids.tolist()
        if self._n_prefix is None:
            self._n_prefix = len(ids)
        return self.allowed(ids[self._n_prefix:])


class Constrainer:
    """Builds :class:`GrammarConstraint` s for a tokenizer and action codec (token pieces computed once).

    The ``language`` codec constrains all three levels; ``action_tokens`` too, its chunk level over the digit
    tokens of its map (plain digit tokens excluded); flat codecs (``binned``) are not supported.
    """

    def __init__(self, tokenizer: Any, codec: Any) -> None:
        if codec.name not in ("language", "action_tokens"):
            raise ValueError(f"constrained decoding supports the language and action_tokens codecs, "
                             f"not {codec.name!r}")
        self.tokenizer, self.codec = tokenizer, codec
        self.special = [int(i) for i in tokenizer.all_special_ids]
        self.pieces = token_pieces(tokenizer)
        self._budgets: dict[str, TokenBudget] = {}
        if codec.name == "action_tokens":
            digits = set("0123456789")
            self.chunk_pieces = {i: p for i, p in self.pieces.items() if not set(p) & digits}
            self.chunk_pieces.update({t: str(d) for d, t in enumerate(codec.digit_ids)})
            self.chunk_text: Callable[[Sequence[int]], str] = codec.to_text
        else:
            self.chunk_pieces, self.chunk_text = self.pieces, self._decode

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def constraint(self, level: str, max_new_tokens: int) -> GrammarConstraint:
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        grammar = level_grammar(level, self.codec.limits.max_elements)
        eos = self.tokenizer.eos_token_id
        budget = self._budgets.get(level)
        if level == "chunk":
            skip = [i for i in self.special if i not in getattr(self.codec, "digit_ids", ())]
            c = GrammarConstraint(grammar, self.chunk_pieces, self.chunk_text, eos, max_new_tokens, skip, budget)
        else:
            c = GrammarConstraint(grammar, self.pieces, self._decode, eos, max_new_tokens, self.special, budget)
        self._budgets[level] = c.budget  # its memo serves every later generation of this level
        return c
