"""Relay process liveness in the store: expiry, the sweep of expired processes, and a late process coming back."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from relay import store
from relay.models import Client, RelayProcess
from relay.store import relayprocess

pytestmark = pytest.mark.django_db


def _info(pid: int) -> relayprocess.ProcessInfo:
    return relayprocess.ProcessInfo("host", pid, "127.0.0.1:6001", pid, timezone.now())


def _expire(process_id: int) -> None:
    RelayProcess.objects.filter(id=process_id).update(expires=timezone.now() - datetime.timedelta(seconds=1))


def _live_names() -> set[str]:
    return set(Client.objects.filter(relayprocess.live_sessions()).values_list("name", flat=True))


def test_sessions_count_only_while_their_process_reports() -> None:
    first, second = relayprocess.register(_info(1), 5.0), relayprocess.register(_info(2), 5.0)
    a = store.open_session("a", "", first)
    store.open_session("b", "", second)
    store.open_session("legacy")  # a session without a relay process is taken at its word
    assert _live_names() == {"a", "b", "legacy"}
    _expire(first)
    assert _live_names() == {"b", "legacy"}
    loaded = Client.objects.select_related("relay_process").get(id=a.client_id)
    assert loaded.connected and not relayprocess.session_is_live(loaded, timezone.now())
    # The next report of a live process ends the expired one's sessions in the store, and only those.
    assert relayprocess.report(second, _info(2), 5.0, 1, {}) == 1
    assert not RelayProcess.objects.filter(id=first).exists()
    assert set(Client.objects.filter(connected=True).values_list("name", flat=True)) == {"b", "legacy"}
    assert RelayProcess.objects.get(id=second).connections == 1


def test_a_late_process_gets_its_row_and_its_current_sessions_back() -> None:
    late, other = relayprocess.register(_info(1), 5.0), relayprocess.register(_info(2), 5.0)
    kept = store.open_session("kept", "", late)
    moved = store.open_session("moved", "", late)
    _expire(late)
    relayprocess.report(other, _info(2), 5.0, 0, {})
    assert not RelayProcess.objects.filter(id=late).exists() and _live_names() == set()
    # "moved" authenticated again on the other process meanwhile: its old session must stay closed.
    store.open_session("moved", "", other)
    assert relayprocess.report(late, _info(1), 5.0, 2, {kept.client_id: kept.token, moved.client_id: moved.token}) == 0
    back = RelayProcess.objects.get(id=late)
    assert back.expires > timezone.now() and back.connections == 2
    assert _live_names() == {"kept", "moved"}
    assert Client.objects.get(id=kept.client_id).relay_process_id == late
    assert Client.objects.get(id=moved.client_id).relay_process_id == other


def test_a_process_that_stops_cleanly_leaves_nothing_behind() -> None:
    process_id = relayprocess.register(_info(1), 5.0)
    session = store.open_session("c", "", process_id)
    relayprocess.end(process_id)
    assert not RelayProcess.objects.exists()
    client = Client.objects.get(id=session.client_id)
    assert not client.connected and client.relay_process_id is None
