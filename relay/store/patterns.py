"""Filter name patterns: a schema or table name exactly, or with ``*`` (any run of characters) and ``?`` (one
character); every other character stands for itself, and the match is case-sensitive like MySQL's names on Linux."""

from __future__ import annotations


class NamePattern:
    """A name pattern compiled for matching in time linear in the name's length, whatever the pattern.

    Regular expressions backtrack: ``*`` thirty times then a character that never comes takes exponential time.
    Here the pattern is an automaton whose states (the pattern's positions) are simulated all at once as the bits of
    one integer, so each character of the name costs a shift, two ANDs and two ORs over ``len(pattern) + 1`` bits.
    Bit ``i`` set means "the name so far matches the first ``i`` tokens of the pattern".
    """

    __slots__ = ("_accept", "_any", "_exact", "_masks", "_stars")

    def __init__(self, pattern: str) -> None:
        if "*" not in pattern and "?" not in pattern:
            self._exact: str | None = pattern
            return
        self._exact = None
        tokens: list[str] = []
        for char in pattern:  # runs of stars match what one star matches
            if not (char == "*" and tokens and tokens[-1] == "*"):
                tokens.append(char)
        masks: dict[str, int] = {}
        any_char = stars = 0
        for position, token in enumerate(tokens, start=1):
            bit = 1 << position
            if token == "*":
                stars |= bit
                any_char |= bit
            elif token == "?":
                any_char |= bit
            else:
                masks[token] = masks.get(token, 0) | bit
        # A literal character's mask also holds the wildcard positions, which take any character.
        self._masks = {char: mask | any_char for char, mask in masks.items()}
        self._any = any_char
        self._stars = stars
        self._accept = 1 << len(tokens)

    def matches(self, name: str) -> bool:
        if self._exact is not None:
            return self._exact == name
        masks, any_char, stars = self._masks, self._any, self._stars
        state = 1 | ((1 << 1) & stars)  # a leading star matches the empty prefix
        for char in name:
            # Advance every live position by this character, or stay on a star that swallows it; then let each
            # star that was just reached match the empty string.
            state = ((state << 1) & masks.get(char, any_char)) | (state & stars)
            if not state:
                return False
            state |= (state << 1) & stars
        return bool(state & self._accept)


def name_matches(pattern: str, name: str) -> bool:
    """``*`` (any run of characters) and ``?`` (one character); every other character stands for itself."""
    return NamePattern(pattern).matches(name)
