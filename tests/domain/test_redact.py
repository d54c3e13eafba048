"""The safe translator's masking of secret shapes: each is masked, the words around it stay exact,
and text that only looks near one is left alone."""

from __future__ import annotations

import pytest

from corral.domain.redact import MASK, redact


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("key sk-ant-api03-AbCdEfGhIjKlMnOpQrSt here", f"key {MASK} here"),
        ("push with glpat-AbCdEfGhIjKlMnOpQrSt12 failed", f"push with {MASK} failed"),
        ("npm_0123456789abcdefghijABCDEFGHIJ012345 expired", f"{MASK} expired"),
        ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234 ok", f"token {MASK} ok"),
        ("stripe sk_live_AbCdEfGhIjKlMnOp12 and rk_test_AbCdEfGhIjKlMnOp12", f"stripe {MASK} and {MASK}"),
        ("auth eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36P", f"auth {MASK}"),
        (
            "fatal: could not read from https://deploy:s3cr3t-pa55@git.example.com/team/app.git",
            f"fatal: could not read from https://deploy:{MASK}@git.example.com/team/app.git",
        ),
        ("postgresql://corral:hunter2@db.internal/corral", f"postgresql://corral:{MASK}@db.internal/corral"),
        ("mysql --password hunter2 -h db", f"mysql --password {MASK} -h db"),
        ("tool --token=abc123 --verbose", f"tool --token={MASK} --verbose"),
        ("curl --api-key 'k-1234' https://x", f"curl --api-key {MASK} https://x"),
    ],
)
def test_a_secret_shape_is_masked_and_the_text_around_it_kept(text: str, masked: str) -> None:
    assert redact(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "ssh://git@github.com/team/app.git",  # a user with no password
        "https://github.com/team/app.git",
        "see user@example.com or http://host:8080/path",
        "mysql --password-file /etc/db.pass",  # names a file, not a secret
        "npm_install is a script name",
        "eyJ alone is no token",
    ],
)
def test_text_that_only_looks_near_a_secret_is_left_exact(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "hostile",
    ["eyJ" * 300_000, "eyJ" + "a" * 1_000_000, "http://" + "a" * 500_000 + ":" + "b" * 500_000, "a:" * 500_000],
)
def test_a_megabyte_of_near_misses_is_scanned_once_not_from_every_position(hostile: str) -> None:
    # A pattern that scanned a run again from each of its starts would take hours here (the test's timeout ends it).
    assert redact(hostile) == hostile
