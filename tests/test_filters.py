"""The filter index: exact and wildcard names, event masks, one subscription per client, earliest filter wins."""

from relay.store.patterns import NamePattern, name_matches
from relay.worker.filterindex import FilterIndex, FilterSpec


def spec(filter_id: int, client: int, mask: int, schema: str, table: str, limit: int = 0, policy: int = 0):
    return FilterSpec(filter_id, client, mask, schema, table, limit, policy)


def test_names_match_exactly_or_with_wildcards() -> None:
    assert name_matches("shop", "shop")
    assert not name_matches("shop", "Shop")  # case-sensitive, like table names on Linux
    assert name_matches("*", "anything")
    assert name_matches("ord*", "orders")
    assert name_matches("ord?rs", "orders")
    assert not name_matches("ord?rs", "ordrs")
    assert name_matches("a*b*c", "a--b--c")
    assert not name_matches("orders", "orders2")
    # Regex and fnmatch specials stand for themselves.
    assert name_matches("t[1]", "t[1]")
    assert not name_matches("t[1]", "t1")
    assert name_matches("t.x", "t.x")
    assert not name_matches("t.x", "tax")


def test_mask_and_names_select_clients() -> None:
    index = FilterIndex(
        [
            spec(1, client=1, mask=1, schema="shop", table="orders"),
            spec(2, client=2, mask=7, schema="shop", table="*"),
            spec(3, client=3, mask=4, schema="*", table="orders"),
        ]
    )
    assert [s.client_id for s in index.match("shop", "orders", 1)] == [1, 2]
    assert [s.client_id for s in index.match("shop", "orders", 2)] == [2]
    assert [s.client_id for s in index.match("shop", "orders", 4)] == [2, 3]
    assert [s.client_id for s in index.match("crm", "orders", 4)] == [3]
    assert index.match("crm", "people", 1) == ()


def test_one_subscription_per_client_with_the_earliest_filters_limit() -> None:
    index = FilterIndex(
        [
            spec(5, client=1, mask=3, schema="shop", table="orders", limit=50, policy=2),
            spec(2, client=1, mask=1, schema="shop", table="ord*", limit=10, policy=1),
        ]
    )
    (only,) = index.match("shop", "orders", 1)
    assert (only.client_id, only.queue_limit, only.discard_policy) == (1, 10, 1)
    (update,) = index.match("shop", "orders", 2)
    assert (update.queue_limit, update.discard_policy) == (50, 2)


def test_wildcard_matching_agrees_with_a_reference_on_every_short_pattern() -> None:
    """Every pattern of up to 5 tokens over {a, b, *, ?} against every name of up to 5 letters over {a, b, c}."""
    import itertools
    import re

    def reference(pattern: str, name: str) -> bool:
        regex = "".join("." if c == "?" else ".*" if c == "*" else re.escape(c) for c in pattern)
        return re.fullmatch(regex, name, re.DOTALL) is not None

    names = ["".join(letters) for size in range(6) for letters in itertools.product("abc", repeat=size)]
    for size in range(6):
        for tokens in itertools.product("ab*?", repeat=size):
            pattern = "".join(tokens)
            for name in names:
                assert name_matches(pattern, name) == reference(pattern, name), (pattern, name)


def test_wildcard_matching_is_linear_where_backtracking_is_exponential() -> None:
    # A backtracking matcher tries every way to split these names among the stars before failing (it never ends);
    # here each character costs the same few integer operations.
    assert NamePattern("*" * 30 + "!").matches("a" * 64) is False
    assert NamePattern("a*" * 100 + "!").matches("a" * 255) is False
    assert NamePattern("*a*b?c*").matches("xxaxxbyczz")
    assert NamePattern("**").matches("") and NamePattern("*?*").matches("q") and not NamePattern("*?*").matches("")
