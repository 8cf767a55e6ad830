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


def _random_filters(rng, clients: range, first_id: int, count: int) -> list[FilterSpec]:  # type: ignore[no-untyped-def]
    names = ["shop", "crm", "s*", "*", "c?m", "orders", "people", "o*", "*s"]
    return [
        spec(first_id + n, rng.choice(clients), rng.randint(1, 7), rng.choice(names), rng.choice(names), n, n % 3)
        for n in range(count)
    ]


def test_an_update_of_some_clients_answers_as_an_index_built_afresh(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Updated in place (the cached answers mended, or dropped when mending costs more), the index answers every
    (schema, table, kind) as an index built from the same filters does."""
    import random

    from relay.worker import filterindex

    keys = [
        (schema, table, kind) for schema in ("shop", "crm", "x") for table in ("orders", "people") for kind in (1, 2, 4)
    ]
    for mend_limit in (filterindex._MEND_LIMIT, 0):
        monkeypatch.setattr(filterindex, "_MEND_LIMIT", mend_limit)
        rng = random.Random(mend_limit)
        filters = _random_filters(rng, range(1, 9), 1, 40)
        index = FilterIndex(filters)
        next_id = 100
        for _ in range(30):
            for key in rng.sample(keys, 6):  # some answers cached before the update
                index.match(*key)
            changed = set(rng.sample(range(1, 11), rng.randint(1, 3)))  # clients 9 and 10 are new
            added = [f for f in _random_filters(rng, range(1, 11), next_id, 12) if f.client_id in changed]
            next_id += 12
            kept = [f for f in filters if f.client_id in changed and rng.random() < 0.5]
            filters = [f for f in filters if f.client_id not in changed] + kept + added
            index.update(changed, [*kept, *added])
            fresh = FilterIndex(filters)
            assert len(index) == len(fresh)
            for key in keys:
                assert index.match(*key) == fresh.match(*key), key
