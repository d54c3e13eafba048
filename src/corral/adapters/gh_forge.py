"""GitHub through the person's own ``gh`` login: corral's own REST calls and GraphQL queries, run by ``gh api``.

corral never holds a token: ``gh`` brings its login (or ``GH_TOKEN`` / ``GH_ENTERPRISE_TOKEN``) to every call.
The porcelain commands (``gh pr create``, ``gh pr merge``) are not used: their queries differ between ``gh``
versions, while ``gh api`` sends exactly what corral wrote. The host comes from the remote's URL and reaches
``gh`` as ``GH_HOST`` (``gh api --hostname`` takes no port; an Enterprise host may have one).

Every answer is read with ``--include``, so the HTTP status and the rate-limit headers are seen: an outage
(a 5xx, a connection that failed) and a rate limit are :class:`ForgeUnavailable` (with the forge's stated
reset), waited out by the caller and never taken for the pull request's state; a refusal is
:class:`ForgeRefused` with GitHub's own words. Everything the forge says is untrusted text: the short fields
(URLs, check names, logins, its messages) are escaped here, at intake; a comment's body and a log's tail are
sanitized as prose where they become feedback.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from corral.adapters.process import Runner
from corral.domain.sanitize import one_line
from corral.errors import CorralError, ForgeRefused, ForgeUnavailable, ProgramError

#: How long one ``gh`` call may run.
CALL_TIMEOUT = 60.0
#: How many log bytes of a failed check are kept (its tail, where the failure is).
LOG_TAIL = 4000


class ForgeRepo(Struct, frozen=True):
    host: str
    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.host}/{self.owner}/{self.name}"


_URL = re.compile(
    r"^(?:https://(?:[^@/]+@)?(?P<h1>[A-Za-z0-9.\-]+(?::\d+)?)/|(?:ssh://)?git@(?P<h2>[A-Za-z0-9.\-]+)[:/])"
    r"(?P<owner>[A-Za-z0-9_.\-]+)/(?P<name>[A-Za-z0-9_.\-]+?)(?:\.git)?/?$"
)


def parse_remote(url: str) -> ForgeRepo | None:
    """The forge repository a remote URL names (https or ssh), or None when it names none."""
    m = _URL.match(url.strip())
    if not m:
        return None
    return ForgeRepo(m.group("h1") or m.group("h2"), m.group("owner"), m.group("name"))


class Check(Struct, frozen=True):
    name: str
    state: str  # "pending", "success", "failure"
    job_id: int | None = None


class Remark(Struct, frozen=True):
    """A review or a comment on a pull request (``state``: APPROVED, CHANGES_REQUESTED, COMMENTED)."""

    id: str
    author: str
    state: str
    body: str


class PullState(Struct, frozen=True):
    number: int
    url: str
    state: str  # OPEN, CLOSED, MERGED
    head_oid: str
    merge_commit: str | None
    review_decision: str | None
    checks: tuple[Check, ...]
    remarks: tuple[Remark, ...]
    auto_merge: bool
    draft: bool

    @property
    def failing(self) -> list[Check]:
        return [c for c in self.checks if c.state == "failure"]

    @property
    def pending(self) -> list[Check]:
        return [c for c in self.checks if c.state == "pending"]


class Pull(Struct, frozen=True):
    number: int
    url: str
    node_id: str
    head_oid: str


class Merged(Struct, frozen=True):
    """A merge's answer: ``sha`` when it merged; else GitHub's ``reason`` and whether the head ``moved``."""

    sha: str | None
    reason: str | None = None
    moved: bool = False


_PULL_FIELDS = """
    number url state isDraft headRefOid reviewDecision
    mergeCommit { oid }
    autoMergeRequest { enabledAt }
    commits(last: 1) { nodes { commit { oid statusCheckRollup { state contexts(first: 50) { nodes {
      __typename ... on CheckRun { name status conclusion databaseId }
      ... on StatusContext { context state } } } } } } }
    reviews(last: 50) { nodes { id state body author { login } } }
    comments(last: 50) { nodes { id body author { login } } }
"""


class GhForge:
    """One forge repository, reached through ``gh api``."""

    def __init__(self, runner: Runner, repo: ForgeRepo, *, program: str = "gh") -> None:
        self.runner = runner
        self.repo = repo
        self.program = program
        self.calls = 0

    # --- the wire ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, doc: Any = None) -> tuple[int, dict[str, str], Any]:
        argv = [self.program, "api", "--include", "-X", method, path]
        if doc is not None:
            argv += ["--input", "-"]
        env = {"GH_HOST": self.repo.host, "GH_PROMPT_DISABLED": "1", "GH_NO_UPDATE_NOTIFIER": "1", "NO_COLOR": "1"}
        self.calls += 1
        try:
            done = self.runner.run(
                argv, env=env, input=json.dumps(doc) if doc is not None else None, timeout=CALL_TIMEOUT
            )
        except ProgramError as exc:
            raise ForgeUnavailable(f"gh could not be run: {exc.message}", hint=exc.hint) from None
        status, headers, body = _split(done.stdout)
        if status is None:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise ForgeUnavailable(
                f"{self.repo.host} could not be reached through gh: {one_line(said[-1], 300) if said else 'no answer'}",
                hint=f"Check gh's login and the network: GH_HOST={self.repo.host} gh auth status",
            )
        try:
            parsed: Any = json.loads(body) if body.strip() else None
        except ValueError:
            parsed = body
        if status >= 500:
            raise ForgeUnavailable(f"{self.repo.host} answered {status}: it is having an outage.")
        remaining = headers.get("x-ratelimit-remaining")
        if status in (403, 429) and (remaining == "0" or "rate limit" in _said(parsed).lower()):
            reset = headers.get("x-ratelimit-reset")
            retry_at = float(reset) if reset and reset.isdigit() else time.time() + 60
            raise ForgeUnavailable(
                f"{self.repo.host}'s rate limit is used up until "
                f"{time.strftime('%H:%M:%S', time.localtime(retry_at))}.",
                retry_at=retry_at,
            )
        if status == 401:
            raise CorralError(
                f"gh is not logged in to {self.repo.host} (the forge answered 401).",
                code="forge-login",
                hint=f"gh auth login --hostname {self.repo.host}",
            )
        return status, headers, parsed

    def _rest(self, method: str, path: str, doc: Any = None, *, ok: Sequence[int] = (200, 201)) -> Any:
        status, _headers, parsed = self._call(method, f"repos/{self.repo.owner}/{self.repo.name}{path}", doc)
        if status not in ok:
            raise ForgeRefused(f"{self.repo.host} refused {method} {path}: {_said(parsed)[:300]}", status=status)
        return parsed

    def graphql(self, query: str, variables: Mapping[str, Any]) -> Any:
        status, _headers, parsed = self._call("POST", "graphql", {"query": query, "variables": dict(variables)})
        if status != 200 or not isinstance(parsed, dict):
            raise ForgeRefused(f"{self.repo.host} refused a query: {_said(parsed)[:300]}", status=status)
        errors = parsed.get("errors") or []
        if any(e.get("type") == "RATE_LIMITED" for e in errors if isinstance(e, dict)):
            raise ForgeUnavailable(f"{self.repo.host}'s GraphQL rate limit is used up.", retry_at=time.time() + 60)
        if errors and parsed.get("data") is None:
            raise ForgeRefused(f"{self.repo.host} refused a query: {_said(errors[0])[:300]}", status=status)
        return parsed

    # --- what corral asks ---------------------------------------------------------------------------

    def login(self) -> str:
        status, _h, parsed = self._call("GET", "user")
        if status != 200 or not isinstance(parsed, dict):
            raise ForgeRefused(f"{self.repo.host} did not say who gh is logged in as: {_said(parsed)}", status=status)
        return str(parsed.get("login", ""))

    def repository(self) -> dict[str, Any]:
        found = self._rest("GET", "")
        return found if isinstance(found, dict) else {}

    def find_pull(self, head: str) -> Pull | None:
        """The open pull request from ``head`` (a branch of this repository), if any."""
        found = self._rest("GET", f"/pulls?head={self.repo.owner}:{head}&state=open")
        for doc in found if isinstance(found, list) else []:
            return _pull(doc)
        return None

    def open_pull(self, head: str, base: str, title: str, body: str, *, draft: bool = False) -> Pull:
        doc = {"head": head, "base": base, "title": title, "body": body, "draft": draft}
        return _pull(self._rest("POST", "/pulls", doc))

    def update_pull(self, number: int, title: str, body: str) -> Pull:
        return _pull(self._rest("PATCH", f"/pulls/{number}", {"title": title, "body": body}))

    def merge(self, number: int, sha: str, title: str, message: str) -> Merged:
        """Squash-merge pull request ``number`` only if its head is still ``sha`` (the reviewed commit)."""
        doc = {"sha": sha, "merge_method": "squash", "commit_title": title, "commit_message": message}
        status, _h, parsed = self._call("PUT", f"repos/{self.repo.owner}/{self.repo.name}/pulls/{number}/merge", doc)
        if status == 200 and isinstance(parsed, dict) and parsed.get("merged"):
            return Merged(str(parsed["sha"]))
        if status in (405, 409, 422):
            return Merged(None, _said(parsed)[:300], moved=status == 409)
        raise ForgeRefused(f"{self.repo.host} refused the merge of #{number}: {_said(parsed)[:300]}", status=status)

    def auto_merge(self, node_id: str, sha: str, headline: str, body: str) -> str | None:
        """Ask the forge to merge once its checks and reviews allow, pinned to ``sha``; None when it took it,
        else its reason (the repository allows no auto-merge, the head moved)."""
        query = (
            "mutation CorralAutoMerge($pr: ID!, $head: GitObjectID!, $headline: String!, $body: String!) {"
            " enablePullRequestAutoMerge(input: {pullRequestId: $pr, mergeMethod: SQUASH, expectedHeadOid: $head,"
            " commitHeadline: $headline, commitBody: $body}) { pullRequest { number } } }"
        )
        try:
            found = self.graphql(query, {"pr": node_id, "head": sha, "headline": headline, "body": body})
        except ForgeRefused as exc:
            return exc.message
        errors = found.get("errors") or []
        return _said(errors[0])[:300] if errors else None

    def pulls(self, numbers: Sequence[int]) -> dict[int, PullState]:
        """Every pull request named, in one GraphQL query."""
        if not numbers:
            return {}
        aliases = "\n".join(f"p{n}: pullRequest(number: {int(n)}) {{ {_PULL_FIELDS} }}" for n in numbers)
        query = (
            "query CorralPullRequests($owner: String!, $name: String!) {"
            f" repository(owner: $owner, name: $name) {{ {aliases} }} rateLimit {{ remaining resetAt }} }}"
        )
        found = self.graphql(query, {"owner": self.repo.owner, "name": self.repo.name})
        repository = ((found.get("data") or {}).get("repository")) or {}
        states = {}
        for n in numbers:
            doc = repository.get(f"p{int(n)}")
            if isinstance(doc, dict):
                states[int(n)] = _pull_state(doc)
        return states

    def close(self, number: int, comment: str) -> None:
        if comment:
            self._rest("POST", f"/issues/{number}/comments", {"body": comment})
        self._rest("PATCH", f"/pulls/{number}", {"state": "closed"})

    def job_log(self, job_id: int) -> str:
        """The tail of a check's log (empty when the forge keeps none)."""
        status, _h, parsed = self._call("GET", f"repos/{self.repo.owner}/{self.repo.name}/actions/jobs/{job_id}/logs")
        if status != 200:
            return ""
        text = parsed if isinstance(parsed, str) else json.dumps(parsed)
        return text[-LOG_TAIL:]


def _split(out: str) -> tuple[int | None, dict[str, str], str]:
    """``gh api --include``'s output: the status line, the headers, the body."""
    m = re.match(r"HTTP/[\d.]+ (\d{3})[^\n]*\n", out)
    if not m:
        return None, {}, out
    head, _, body = out[m.end() :].partition("\n\n")
    headers = {}
    for line in head.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            headers[key.strip().lower()] = value.strip()
    return int(m.group(1)), headers, body


def _said(doc: Any) -> str:
    """What the forge said, as one escaped line: it is untrusted text on its way into an error message."""
    if isinstance(doc, dict):
        return one_line(str(doc.get("message") or doc), 300)
    return one_line(str(doc or ""), 300)


def _pull(doc: Any) -> Pull:
    if not isinstance(doc, dict):
        raise ForgeRefused(f"The forge answered with no pull request: {_said(doc)[:200]}", status=200)
    return Pull(int(doc["number"]), one_line(str(doc["html_url"]), 300), str(doc["node_id"]), str(doc["head"]["sha"]))


def _login(doc: dict[str, Any]) -> str:
    return one_line(str((doc.get("author") or {}).get("login", "")), 60)


def _pull_state(doc: dict[str, Any]) -> PullState:
    checks: list[Check] = []
    nodes = (doc.get("commits") or {}).get("nodes") or []
    rollup = ((nodes[-1].get("commit") or {}).get("statusCheckRollup") if nodes else None) or {}
    for node in (rollup.get("contexts") or {}).get("nodes") or []:
        if node.get("__typename") == "StatusContext":
            state = {"SUCCESS": "success", "PENDING": "pending", "EXPECTED": "pending"}.get(
                node.get("state"), "failure"
            )
            checks.append(Check(one_line(str(node.get("context")), 100), state))
            continue
        if node.get("status") != "COMPLETED":
            state = "pending"
        elif node.get("conclusion") in ("SUCCESS", "NEUTRAL", "SKIPPED"):
            state = "success"
        else:
            state = "failure"
        job = node.get("databaseId")
        checks.append(Check(one_line(str(node.get("name")), 100), state, int(job) if isinstance(job, int) else None))
    remarks = [
        Remark(str(r["id"]), _login(r), str(r.get("state", "")), str(r["body"]))
        for r in (doc.get("reviews") or {}).get("nodes") or []
    ] + [
        Remark(str(c["id"]), _login(c), "COMMENTED", str(c["body"]))
        for c in (doc.get("comments") or {}).get("nodes") or []
    ]
    return PullState(
        int(doc["number"]),
        one_line(str(doc["url"]), 300),
        str(doc["state"]),
        str(doc["headRefOid"]),
        (doc.get("mergeCommit") or {}).get("oid"),
        doc.get("reviewDecision"),
        tuple(checks),
        tuple(remarks),
        doc.get("autoMergeRequest") is not None,
        bool(doc.get("isDraft")),
    )
