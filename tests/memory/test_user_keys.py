"""User keys: an HMAC of a user's id under the server's own secret, which is made once and kept (the same user has
the same key after a restart), differs by kind of id, and never names the id itself."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from vita.memory.user_keys import UserKeys, new_user_id, valid_user_id

pytestmark = pytest.mark.fast  # loads no model: scripts/test.sh --fast


def test_keys_are_stable_across_runs_and_differ_by_kind(tmp_path: Path) -> None:
    secret = tmp_path / "state" / "memory.key"
    first = UserKeys(secret)
    user = new_user_id()
    assert valid_user_id(user)
    key = first.key("page", user)
    assert UserKeys(secret).key("page", user) == key  # a restart: the same user, the same memory
    assert first.key("phone", user) != key and first.key("page", new_user_id()) != key
    assert user not in key and len(key) == 32
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert UserKeys(tmp_path / "other.key").key("page", user) != key  # another server's secret


@pytest.mark.parametrize("value", [None, "", "abc", "0" * 31, "g" * 32, "A" * 32, "0" * 33, "../" + "0" * 29])
def test_only_an_id_this_server_could_have_given_is_a_user(value: str | None) -> None:
    assert not valid_user_id(value)


def test_a_secret_cut_short_is_refused_never_replaced(tmp_path: Path) -> None:
    secret = tmp_path / "memory.key"
    secret.write_bytes(b"short")
    with pytest.raises(ValueError, match="not a 32-byte secret"):
        UserKeys(secret)
    assert secret.read_bytes() == b"short"  # (every user's memory hangs on it: the operator decides)
