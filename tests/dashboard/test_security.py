"""The dashboard's security rules over plain HTTP: loopback, the token exchanged for a cookie, CSRF and
Origin on every state-changing request, the Host header, the headers every response carries."""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import pytest
from tests.dashboard.conftest import Dash

from corral.dashboard import security
from corral.dashboard.html import esc
from corral.errors import CorralError


def test_served_on_loopback_with_a_private_secret_made_once(dash: Dash) -> None:
    assert dash.host == "127.0.0.1"
    home = Path(os.environ["CORRAL_HOME"])
    path = security.secret_file(home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert security.secret(home) == dash.token  # made once: the daemon's and the CLI's are the same
    assert dash.a.json("dashboard")["url"] == dash.url  # asked again: the same daemon, the same URL
    assert dash.a.json("daemon", "status")["daemon"]["dashboard_url"] == dash.server  # the root is not in it


def test_the_token_is_exchanged_for_a_strict_http_only_cookie_and_leaves_the_url(dash: Dash) -> None:
    response = dash.request("GET", f"/?token={dash.token}")
    assert response.status == 303 and response.getheader("location") == f"{dash.root}/"
    cookie = response.getheader("set-cookie", "")
    # Scoped to the secret root: the person's browser sends it to no other server on 127.0.0.1
    # (cookies do not tell ports apart), such as a preview server an agent started.
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Path={dash.root}/;" in cookie
    assert "Max-Age=" in cookie
    keys = security.Keys(Path(os.environ["CORRAL_HOME"]), dash.token)
    assert dash.root == keys.prefix and len(keys.root) >= 20 and dash.token not in dash.root
    page = dash.request("GET", "/", headers={"Cookie": cookie.split(";", 1)[0]})
    assert page.status == 200


def test_a_request_without_the_cookie_or_with_a_wrong_token_is_refused(dash: Dash) -> None:
    assert dash.request("GET", "/").status == 401
    assert dash.request("GET", "/events/board").status == 401
    assert dash.request("GET", "/?token=" + "x" * 43).status == 401
    assert dash.request("GET", "/", headers={"Cookie": "corral_0000000000=forged"}).status == 401
    name = dash.cookie().split("=", 1)[0]
    assert dash.request("GET", "/", headers={"Cookie": f"{name}={'0' * 64}"}).status == 401


def test_a_foreign_host_header_is_refused(dash: Dash) -> None:
    cookie = dash.cookie()
    assert dash.request("GET", "/", headers={"Cookie": cookie, "Host": f"evil.example:{dash.port}"}).status == 403
    assert dash.request("GET", f"/?token={dash.token}", headers={"Host": f"evil.example:{dash.port}"}).status == 403
    assert dash.request("GET", "/", headers={"Cookie": cookie, "Host": f"localhost:{dash.port}"}).status == 200


def test_a_post_without_the_csrf_token_or_with_a_foreign_origin_is_refused(dash: Dash) -> None:
    cookie = dash.cookie()
    path = dash.task_path(dash.a, "alpha-one") + "/close"
    keys = security.Keys(Path(os.environ["CORRAL_HOME"]), dash.token)
    own = f"http://127.0.0.1:{dash.port}"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = urlencode({"message": "not wanted"})
    refused = [
        {"Cookie": cookie, "Origin": own, **form},  # no CSRF token
        {"Cookie": cookie, "Origin": own, "X-Corral-CSRF": "0" * 64, **form},  # a wrong one
        {"Cookie": cookie, "Origin": "http://evil.example", "X-Corral-CSRF": keys.csrf, **form},
        {"Cookie": cookie, "X-Corral-CSRF": keys.csrf, **form},  # no Origin at all
        {"Origin": own, "X-Corral-CSRF": keys.csrf, **form},  # no cookie
    ]
    for headers in refused:
        assert dash.request("POST", path, headers=headers, body=body).status in (401, 403), headers
    assert dash.a.json("show", "alpha-one")["task"]["status"] == "backlog"  # nothing was done
    # The form field does as the header does; then the close goes through, as a person's.
    with_field = urlencode({"message": "not wanted", "csrf": keys.csrf})
    done = dash.request("POST", path, headers={"Cookie": cookie, "Origin": own, **form}, body=with_field)
    assert done.status == 200
    shown = dash.a.json("show", "alpha-one")
    assert shown["task"]["status"] == "abandoned"
    assert shown["status_changes"][-1]["actor"] == "human"


def test_every_response_carries_a_strict_csp(dash: Dash) -> None:
    cookie = dash.cookie()
    for path, headers in (("/", {"Cookie": cookie}), ("/", {}), ("/static/dashboard.css", {})):
        response = dash.request("GET", path, headers=headers)
        csp = response.getheader("content-security-policy", "")
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.getheader("x-content-type-options") == "nosniff"


def test_escaping_makes_markup_and_terminal_controls_inert() -> None:
    assert esc("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert esc('<a href="javascript:alert(1)">x</a>') == "&lt;a href=&#34;javascript:alert(1)&#34;&gt;x&lt;/a&gt;"
    assert esc("title \x1b]0;pwn\x07 end") == "title \\x1b]0;pwn\\x07 end"
    assert esc("bidi \u202e") == "bidi \\u202e"


def test_hosts_answered_are_the_address_bound_and_on_loopback_its_names() -> None:
    assert security.allowed_hosts("127.0.0.1", 8123) == {"127.0.0.1:8123", "localhost:8123"}
    assert security.allowed_hosts("192.0.2.7", 8123) == {"192.0.2.7:8123"}  # --host: that address alone
    assert "localhost:8123" in security.allowed_hosts("0.0.0.0", 8123)
    assert "evil.example:8123" not in security.allowed_hosts("0.0.0.0", 8123)


def test_another_host_is_asked_of_a_new_daemon_only(dash: Dash) -> None:
    refused = dash.a("dashboard", "--host", "0.0.0.0", "--json")
    assert refused.returncode != 0 and refused.json()["error"]["code"] == "daemon-running"
    assert "corral daemon stop" in refused.json()["error"]["hint"]
    assert dash.a.json("dashboard", "--host", "localhost")["url"] == dash.url  # loopback is what it serves
    home = Path(os.environ["CORRAL_HOME"])
    assert not (home / "daemon" / "dashboard-host").exists()  # nothing was asked of the next daemon


def test_a_secret_is_made_whole_once_however_many_ask_at_once_and_a_cut_one_is_named(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with ThreadPoolExecutor(8) as pool:
        made = set(pool.map(lambda _: security.secret(home), range(16)))
    assert len(made) == 1 and len(next(iter(made))) >= 32
    path = security.secret_file(home)
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left beside it
    path.write_text("cut\n")
    with pytest.raises(CorralError) as refused:
        security.secret(home)
    assert refused.value.code == "dashboard-secret-unreadable" and "rm " in (refused.value.hint or "")
    assert path.read_text() == "cut\n"  # named, never replaced behind the person's back


def test_nothing_is_served_outside_the_secret_root_and_the_exchange_never_redirects_elsewhere(dash: Dash) -> None:
    cookie = dash.cookie()
    for outside in ("/", "/static/dashboard.css", f"/p/x/t/y?token={dash.token}", f"/?token={dash.token}"):
        assert dash.request("GET", outside, headers={"Cookie": cookie}, outside=True).status == 404, outside
    # The exchange goes to the root whatever path it was asked on: never an open redirect.
    for asked in (f"//evil.example/?token={dash.token}", f"/%5Cevil.example/?token={dash.token}"):
        response = dash.request("GET", asked)
        assert response.status == 303 and response.getheader("location") == f"{dash.root}/", asked


def test_a_cookie_another_page_planted_beside_ours_locks_nobody_out(dash: Dash) -> None:
    name, value = dash.cookie().split("=", 1)
    planted = f"{name}=junk; {name}={value}"  # a page on another port set its own first
    assert dash.request("GET", "/", headers={"Cookie": planted}).status == 200


def test_an_expired_session_and_an_oversized_body_are_refused(dash: Dash) -> None:
    home = Path(os.environ["CORRAL_HOME"])
    old = security.Keys(home, dash.token, clock=lambda: 1_000_000.0)
    name = dash.cookie().split("=", 1)[0]
    assert dash.request("GET", "/", headers={"Cookie": f"{name}={old.cookie_value()}"}).status == 401
    keys = security.Keys(home, dash.token)
    headers = {
        "Cookie": dash.cookie(),
        "Origin": f"http://127.0.0.1:{dash.port}",
        "X-Corral-CSRF": keys.csrf,
        "Content-Type": "application/x-www-form-urlencoded",
    }
    path = dash.task_path(dash.a, "alpha-one") + "/close"
    body = urlencode({"message": "x" * (security.MAX_BODY + 1)})
    assert dash.request("POST", path, headers=headers, body=body).status == 413
    assert dash.a.json("show", "alpha-one")["task"]["status"] == "backlog"


def test_an_ipv6_loopback_bind_answers_the_bracketed_host_a_browser_sends() -> None:
    assert security.allowed_hosts("::1", 8080) >= {"[::1]:8080", "127.0.0.1:8080", "localhost:8080"}


def test_open_hands_the_browser_a_private_page_not_the_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    url = security.signed_url("http://127.0.0.1:9", home)
    page = security.open_file(url, home)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert security.secret(home) not in page.as_uri()  # what the browser's argv would carry
    assert f'content="0;url={esc(url)}"' in page.read_text()


def test_creating_a_task_and_confirming_an_accept_take_the_same_guard(dash: Dash) -> None:
    """The create form and Accept's confirmation are state-changing requests like every button's: without the
    CSRF token, from another Origin or without the cookie, nothing is created and nothing merged."""
    cookie = dash.cookie()
    keys = security.Keys(Path(os.environ["CORRAL_HOME"]), dash.token)
    own = f"http://127.0.0.1:{dash.port}"
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    state = Path(dash.a.json("paths")["paths"]["state"]).name
    create = urlencode({"project": state, "goal": "Sneaked in", "ref": "sneaked"})
    accept = dash.task_path(dash.a, "alpha-one") + "/accept"
    confirmed = urlencode({"confirm": "yes"})
    refused = [
        {"Cookie": cookie, "Origin": own, **form},
        {"Cookie": cookie, "Origin": "http://evil.example", "X-Corral-CSRF": keys.csrf, **form},
        {"Origin": own, "X-Corral-CSRF": keys.csrf, **form},
    ]
    for headers in refused:
        assert dash.request("POST", "/create", headers=headers, body=create).status in (401, 403), headers
        assert dash.request("POST", accept, headers=headers, body=confirmed).status in (401, 403), headers
    assert [t["ref"] for t in dash.a.json("list", "--all")["tasks"]] == ["alpha-one"]
    made = dash.request(
        "POST", "/create", headers={"Cookie": cookie, "Origin": own, **form}, body=create + "&csrf=" + keys.csrf
    )
    assert made.status == 200
    task = dash.a.json("show", "sneaked")["task"]
    assert task["goal"] == "Sneaked in"
    assert dash.a.json("show", "sneaked")["status_changes"][0]["actor"] == "human"
