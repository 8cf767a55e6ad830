"""clientproto/PROTOCOL.md: its worked examples are the codec's output, and the original's match the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

import clientproto as cp
from clientproto.worked_examples import examples
from tests.helpers.clientproto_frames import AUTH_REP, AUTH_REQ, BAD_CHECKSUM_REP, EMPTY_POLL_REP, PING_REP, PING_REQ

DOC = (Path(cp.__file__).parent / "PROTOCOL.md").read_text(encoding="utf-8")
EXAMPLES = {example.name: example for example in examples()}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_every_example_is_in_the_document(name: str) -> None:
    example = EXAMPLES[name]
    assert f"{name}:\n\n```\n{example.hex()}\n```" in DOC, f"regenerate {name!r}: python -m clientproto.worked_examples"


@pytest.mark.parametrize(
    ("name", "frame"),
    [
        ("PING request", PING_REQ),
        ("PING reply", PING_REP),
        ("AUTH request (original key)", AUTH_REQ),
        ("AUTH reply", AUTH_REP),
        ("Bad checksum reply", BAD_CHECKSUM_REP),
        ("Empty reply", EMPTY_POLL_REP),
    ],
)
def test_examples_equal_the_reference_appendix(name: str, frame: bytes) -> None:
    assert EXAMPLES[name].frame == frame


def test_every_example_decodes() -> None:
    """Requests decode (or fail exactly as their reply says); replies pass their checksum."""
    for example in EXAMPLES.values():
        if example.request:
            try:
                header, payload = cp.decode_request_frame(example.frame)
                cp.decode_request(header.command, payload)
            except cp.ProtocolError as exc:
                reply = EXAMPLES[example.name.replace("request", "reply")].frame
                assert cp.error_reply(exc) == reply
        else:
            cp.decode_reply_frame(example.frame)


def test_every_command_is_documented() -> None:
    for command in cp.Command:
        assert f"0x{command.value:02X} | {command.name}" in DOC or f"{command.name} 0x{command.value:02X}" in DOC
    for result in cp.Result:
        assert f"0x{result.value:02X}" in DOC
