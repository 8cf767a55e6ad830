"""The filter index: exact and wildcard names, event masks, one subscription per client, earliest filter wins."""

from relay.worker.filterindex import FilterIndex, FilterSpec, name_matches


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
