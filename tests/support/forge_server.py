"""A scripted GitHub on loopback, over TLS, for the real ``gh``: its REST API under ``/api/v3`` and its GraphQL
under ``/api/graphql``, as GitHub Enterprise serves them, so ``gh`` reaches it with ``GH_HOST=127.0.0.1:PORT``.

A throwaway certificate authority signs the server's certificate (an IP subject-alternative name, which
``gh``'s TLS needs for an address); ``gh`` trusts it through ``SSL_CERT_FILE`` and takes its token from
``GH_ENTERPRISE_TOKEN`` (:meth:`ForgeServer.env`). The repository's git side is a bare repository on disk:
the remote's URL is ``https://127.0.0.1:PORT/OWNER/REPO.git``, and git is told to read it as the bare
repository's path (``url.<path>.insteadOf``), so pushes and fetches never reach the network.

The forge is stateful, not a replay: pull requests, their checks, reviews and comments are objects a test
sets (:meth:`ForgeServer.finish_checks`, :meth:`add_review`, :meth:`close_outside` …); a merge is made in
the bare repository with git's plumbing, as a squash, pinned to the head the merge names (a moved head is
refused with GitHub's 409). GraphQL is answered for corral's own queries, recognised by their operation
names; the fields they read come back in GitHub's shape.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import re
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

OWNER = "acme"
NAME = "widgets"
TOKEN = "forge-test-token"


def _git(bare: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(["git", *args], cwd=bare, check=True, capture_output=True, text=True, env=env)
    return out.stdout.strip()


def make_authority(where: Path) -> tuple[Path, Path, Path]:
    """A certificate authority and a server certificate for 127.0.0.1 signed by it: (ca.pem, cert.pem, key.pem)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scripted forge authority")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )  # digital signature, cert sign, CRL sign
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    where.mkdir(parents=True, exist_ok=True)
    paths = (where / "ca.pem", where / "cert.pem", where / "key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


@dataclass
class Check:
    name: str
    status: str = "IN_PROGRESS"  # QUEUED, IN_PROGRESS, COMPLETED
    conclusion: str | None = None  # SUCCESS, FAILURE, … once COMPLETED
    job_id: int = 0
    log: str = ""


@dataclass
class Review:
    id: str
    author: str
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED
    body: str


@dataclass
class PullRequest:
    number: int
    head: str
    base: str
    title: str
    body: str
    draft: bool
    head_oid: str
    state: str = "OPEN"  # OPEN, CLOSED, MERGED
    merge_commit: str | None = None
    checks: list[Check] = field(default_factory=list)
    reviews: list[Review] = field(default_factory=list)
    comments: list[Review] = field(default_factory=list)
    auto_merge: dict[str, Any] | None = None

    @property
    def node_id(self) -> str:
        return f"PR_{self.number:08d}"


class ForgeServer:
    """The scripted forge. ``required_checks`` start ``IN_PROGRESS`` on every pull request opened (and on
    every new head); ``requires_approval`` makes a merge wait for an approving review."""

    def __init__(
        self,
        root: Path,
        *,
        required_checks: tuple[str, ...] = (),
        requires_approval: bool = False,
        allow_auto_merge: bool = True,
        merge_method: str = "squash",
    ) -> None:
        self.root = root
        #: How this forge merges whatever it is asked for (``squash``, or ``rebase``: each commit replayed onto
        #: the base, the last one the merge commit, as a repository that allows rebase merges only does).
        self.merge_method = merge_method
        self.bare = root / f"{NAME}.git"
        self.required_checks = required_checks
        self.requires_approval = requires_approval
        self.allow_auto_merge = allow_auto_merge
        self.pulls: dict[int, PullRequest] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.failures: list[tuple[int, dict[str, str], dict[str, Any]]] = []  # answers for the next requests
        self.lock = threading.RLock()
        self._ids = 100
        root.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.bare)], check=True)
        self.ca, cert, key = make_authority(root / "tls")
        forge = self

        class Handler(_Handler):
            server_forge = forge

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    # --- what a test wires up -------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def remote_url(self) -> str:
        return f"https://{self.host}/{OWNER}/{NAME}.git"

    def env(self) -> dict[str, str]:
        """What ``gh`` needs to reach this forge and trust it."""
        return {
            "GH_HOST": self.host,
            "GH_ENTERPRISE_TOKEN": TOKEN,
            "SSL_CERT_FILE": str(self.ca),
            "GH_NO_UPDATE_NOTIFIER": "1",
            "GH_PROMPT_DISABLED": "1",
            "NO_COLOR": "1",
        }

    def connect(self, repo: Path, gitconfig: Path | None = None) -> None:
        """Seed the bare repository from ``repo``'s main and make it ``repo``'s origin (read as the path)."""
        _git(repo, "remote", "add", "origin", self.remote_url)
        where = ["--global"] if gitconfig is None else ["--file", str(gitconfig)]
        _git(repo, "config", *where, f"url.{self.bare}.insteadOf", self.remote_url)
        _git(repo, "push", "-q", "origin", "main")

    def monkeypatch(self, monkeypatch: Any) -> None:
        for key, value in self.env().items():
            monkeypatch.setenv(key, value)

    # --- what a test does on the forge's side ---------------------------------------------------------

    def pull(self, number: int | None = None) -> PullRequest:
        with self.lock:
            if number is None:
                return self.pulls[max(self.pulls)]
            return self.pulls[number]

    def finish_checks(self, number: int, conclusion: str = "SUCCESS", *, log: str = "") -> None:
        with self.lock:
            pr = self.pulls[number]
            for check in pr.checks:
                check.status, check.conclusion = "COMPLETED", conclusion
                if log:
                    check.log = log
            self._auto_merge(pr)

    def add_review(self, number: int, state: str, body: str, author: str = "reviewer") -> None:
        with self.lock:
            pr = self.pulls[number]
            pr.reviews.append(Review(self._node("PRR"), author, state, body))
            self._auto_merge(pr)

    def add_comment(self, number: int, body: str, author: str = "reviewer") -> None:
        with self.lock:
            self.pulls[number].comments.append(Review(self._node("IC"), author, "COMMENTED", body))

    def mark_ready(self, number: int) -> None:
        """A draft marked ready for review (an auto-merge waiting on it then merges)."""
        with self.lock:
            pr = self.pulls[number]
            pr.draft = False
            self._auto_merge(pr)

    def close_outside(self, number: int) -> None:
        with self.lock:
            self.pulls[number].state = "CLOSED"

    def merge_outside(self, number: int, method: str | None = None) -> str:
        """A person merges the pull request on the forge (``method``: ``squash`` or ``rebase``)."""
        with self.lock:
            pr = self.pulls[number]
            return self._merge(pr, pr.title, "merged on the forge", method)

    def push_outside(self, number: int, path: str, content: str) -> str:
        """A commit pushed to the pull request's branch on the forge (after the person's review)."""
        with self.lock:
            pr = self.pulls[number]
            blob = subprocess.run(
                ["git", "hash-object", "-w", "--stdin"],
                cwd=self.bare,
                input=content,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            tree = self._tree_with(pr.head_oid, path, blob)
            commit = _git(self.bare, "commit-tree", tree, "-p", pr.head_oid, "-m", "pushed on the forge", env=_ident())
            _git(self.bare, "update-ref", f"refs/heads/{pr.head}", commit)
            self._new_head(pr, commit)
            return commit

    def fail_next(self, count: int = 1, *, status: int = 502, reset_in: int | None = None) -> None:
        """The next ``count`` requests fail: an outage (5xx), or a rate limit (403, remaining 0, reset named)."""
        with self.lock:
            for _ in range(count):
                if reset_in is not None:
                    reset = int(dt.datetime.now(dt.UTC).timestamp()) + reset_in
                    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(reset)}
                    self.failures.append((403, headers, {"message": "API rate limit exceeded for user."}))
                else:
                    self.failures.append((status, {}, {"message": "Server Error"}))

    # --- the forge's own workings ---------------------------------------------------------------------

    def _node(self, prefix: str) -> str:
        self._ids += 1
        return f"{prefix}_{self._ids:08d}"

    def _tree_with(self, base: str, path: str, blob: str) -> str:
        index = self.root / "push-index"
        env = {**_ident(), "GIT_INDEX_FILE": str(index)}
        _git(self.bare, "read-tree", base, env=env)
        _git(self.bare, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        tree = _git(self.bare, "write-tree", env=env)
        index.unlink()
        return tree

    def _new_head(self, pr: PullRequest, oid: str) -> None:
        pr.head_oid = oid
        pr.checks = [Check(name, job_id=self._job()) for name in self.required_checks]
        pr.auto_merge = None  # GitHub turns auto-merge off when the head moves under an expected head

    def _job(self) -> int:
        self._ids += 1
        return self._ids

    def blockers(self, pr: PullRequest) -> str | None:
        """Why this pull request may not merge now, in GitHub's words (405), or None."""
        if pr.draft:
            return "Pull Request is still a draft"
        for check in pr.checks:
            if check.status != "COMPLETED":
                return f'Required status check "{check.name}" is expected.'
            if check.conclusion != "SUCCESS":
                return f'Required status check "{check.name}" is failing.'
        decision = self.decision(pr)
        if decision == "CHANGES_REQUESTED":
            return "Changes must be made through a pull request."
        if self.requires_approval and decision != "APPROVED":
            return "At least 1 approving review is required by reviewers with write access."
        return None

    def decision(self, pr: PullRequest) -> str | None:
        states = [r.state for r in pr.reviews if r.state in ("APPROVED", "CHANGES_REQUESTED")]
        if states:
            return states[-1]
        return "REVIEW_REQUIRED" if self.requires_approval else None

    def _auto_merge(self, pr: PullRequest) -> None:
        if pr.state == "OPEN" and pr.auto_merge is not None and self.blockers(pr) is None:
            self._merge(pr, pr.auto_merge["headline"], pr.auto_merge["body"])

    def _merge(self, pr: PullRequest, title: str, message: str, method: str | None = None) -> str:
        base = _git(self.bare, "rev-parse", f"refs/heads/{pr.base}")
        if (method or self.merge_method) == "rebase":
            commit = self._rebase(base, pr.head_oid)
        else:
            tree = _git(self.bare, "merge-tree", "--write-tree", base, pr.head_oid).splitlines()[0]
            commit = _git(
                self.bare, "commit-tree", tree, "-p", base, "-m", f"{title} (#{pr.number})\n\n{message}", env=_ident()
            )
        _git(self.bare, "update-ref", f"refs/heads/{pr.base}", commit, base)
        pr.state, pr.merge_commit = "MERGED", commit
        return commit

    def _rebase(self, base: str, head: str) -> str:
        """GitHub's rebase merge: each commit of the pull request replayed onto the base, in order, with its own
        message (a three-way merge of the commit against its parent, in an index of its own); the last is the
        merge commit."""
        fork = _git(self.bare, "merge-base", base, head)
        onto = base
        for commit in _git(self.bare, "rev-list", "--reverse", "--no-merges", f"{fork}..{head}").split():
            index = self.root / "rebase-index"
            env = {**_ident(), "GIT_INDEX_FILE": str(index)}
            _git(self.bare, "read-tree", "-i", "-m", "--aggressive", f"{commit}^", onto, commit, env=env)
            tree = _git(self.bare, "write-tree", env=env)
            index.unlink()
            said = _git(self.bare, "log", "-1", "--format=%B", commit)
            onto = _git(self.bare, "commit-tree", tree, "-p", onto, "-m", said or "rebased", env=_ident())
        return onto

    # --- the API ----------------------------------------------------------------------------------------

    def rest(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        prefix = f"/api/v3/repos/{OWNER}/{NAME}"
        if method == "GET" and path == "/api/v3/user":
            return 200, {"login": "person", "id": 1}
        if method == "GET" and path == prefix:
            return 200, {
                "full_name": f"{OWNER}/{NAME}",
                "default_branch": "main",
                "allow_auto_merge": self.allow_auto_merge,
            }
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}
        rest = path[len(prefix) :]
        if method == "GET" and rest.startswith("/pulls?"):
            query = dict(p.split("=", 1) for p in rest.split("?", 1)[1].split("&") if "=" in p)
            head = query.get("head", "").split(":", 1)[-1]
            found = [
                self._pull_json(p)
                for p in self.pulls.values()
                if p.head == head and (query.get("state") == "all" or p.state == "OPEN")
            ]
            return 200, found
        if method == "POST" and rest == "/pulls":
            head_oid = _git(self.bare, "rev-parse", f"refs/heads/{body['head']}")
            if any(p.head == body["head"] and p.state == "OPEN" for p in self.pulls.values()):
                return 422, {"message": "Validation Failed", "errors": [{"message": "A pull request already exists"}]}
            number = max(self.pulls, default=0) + 1
            pr = PullRequest(
                number,
                body["head"],
                body["base"],
                body["title"],
                body.get("body", ""),
                bool(body.get("draft")),
                head_oid,
            )
            self._new_head(pr, head_oid)
            self.pulls[number] = pr
            return 201, self._pull_json(pr)
        m = re.fullmatch(r"/pulls/(\d+)(/merge)?", rest)
        if m and int(m.group(1)) in self.pulls:
            pr = self.pulls[int(m.group(1))]
            if m.group(2) and method == "PUT":
                return self._merge_request(pr, body)
            if method == "PATCH":
                for key in ("title", "body", "state"):
                    if key in body:
                        setattr(pr, key, body[key].upper() if key == "state" else body[key])
                return 200, self._pull_json(pr)
            if method == "GET":
                return 200, self._pull_json(pr)
        m = re.fullmatch(r"/issues/(\d+)/comments", rest)
        if m and method == "POST" and int(m.group(1)) in self.pulls:
            self.pulls[int(m.group(1))].comments.append(Review(self._node("IC"), "person", "COMMENTED", body["body"]))
            return 201, {"id": self._ids}
        m = re.fullmatch(r"/actions/jobs/(\d+)/logs", rest)
        if m and method == "GET":
            for pr in self.pulls.values():
                for check in pr.checks:
                    if check.job_id == int(m.group(1)):
                        return 200, check.log
        return 404, {"message": "Not Found"}

    def _merge_request(self, pr: PullRequest, body: dict[str, Any]) -> tuple[int, Any]:
        if pr.state != "OPEN":
            return 405, {"message": "Pull Request is not mergeable"}
        if body.get("sha") and body["sha"] != pr.head_oid:
            return 409, {"message": "Head branch was modified. Review and try the merge again."}
        blocked = self.blockers(pr)
        if blocked:
            return 405, {"message": blocked}
        commit = self._merge(pr, body.get("commit_title") or pr.title, body.get("commit_message") or "")
        return 200, {"sha": commit, "merged": True, "message": "Pull Request successfully merged"}

    def _pull_json(self, pr: PullRequest) -> dict[str, Any]:
        return {
            "number": pr.number,
            "node_id": pr.node_id,
            "html_url": f"https://{self.host}/{OWNER}/{NAME}/pull/{pr.number}",
            "state": "open" if pr.state == "OPEN" else "closed",
            "merged": pr.state == "MERGED",
            "draft": pr.draft,
            "title": pr.title,
            "body": pr.body,
            "head": {"ref": pr.head, "sha": pr.head_oid},
            "base": {"ref": pr.base},
            "merge_commit_sha": pr.merge_commit,
        }

    def graphql(self, query: str, variables: dict[str, Any]) -> Any:
        name = re.search(r"(?:query|mutation)\s+(\w+)", query)
        op = name.group(1) if name else ""
        if op == "CorralPullRequests":
            repository: dict[str, Any] = {}
            for alias, number in re.findall(r"(\w+)\s*:\s*pullRequest\(number:\s*(\d+)\)", query):
                pr = self.pulls.get(int(number))
                repository[alias] = self._pull_graph(pr) if pr else None
            return {"data": {"repository": repository, "rateLimit": {"remaining": 4999, "resetAt": None}}}
        if op == "CorralAutoMerge":
            pr = next((p for p in self.pulls.values() if p.node_id == variables.get("pr")), None)
            if pr is None:
                return {"data": None, "errors": [{"type": "NOT_FOUND", "message": "Could not resolve to a node"}]}
            if not self.allow_auto_merge:
                return {
                    "data": {"enablePullRequestAutoMerge": None},
                    "errors": [
                        {
                            "type": "UNPROCESSABLE",
                            "message": "Pull request Auto merge is not allowed for this repository",
                        }
                    ],
                }
            if variables.get("head") != pr.head_oid:
                return {
                    "data": {"enablePullRequestAutoMerge": None},
                    "errors": [{"type": "UNPROCESSABLE", "message": "Head sha didn't match expected head sha"}],
                }
            pr.auto_merge = {"headline": variables.get("headline", ""), "body": variables.get("body", "")}
            self._auto_merge(pr)
            return {"data": {"enablePullRequestAutoMerge": {"pullRequest": {"number": pr.number}}}}
        return {"data": None, "errors": [{"message": f"this forge does not answer {op or 'anonymous'} queries"}]}

    def _pull_graph(self, pr: PullRequest) -> dict[str, Any]:
        checks = [
            {
                "__typename": "CheckRun",
                "name": c.name,
                "status": c.status,
                "conclusion": c.conclusion,
                "databaseId": c.job_id,
            }
            for c in pr.checks
        ]
        if not checks:
            rollup = None
        elif any(c.status != "COMPLETED" for c in pr.checks):
            rollup = {"state": "PENDING", "contexts": {"nodes": checks}}
        elif all(c.conclusion == "SUCCESS" for c in pr.checks):
            rollup = {"state": "SUCCESS", "contexts": {"nodes": checks}}
        else:
            rollup = {"state": "FAILURE", "contexts": {"nodes": checks}}
        return {
            "number": pr.number,
            "url": f"https://{self.host}/{OWNER}/{NAME}/pull/{pr.number}",
            "state": pr.state,
            "isDraft": pr.draft,
            "headRefOid": pr.head_oid,
            "mergeCommit": {"oid": pr.merge_commit} if pr.merge_commit else None,
            "reviewDecision": self.decision(pr),
            "autoMergeRequest": {"enabledAt": "2026-01-01T00:00:00Z"} if pr.auto_merge else None,
            "commits": {"nodes": [{"commit": {"oid": pr.head_oid, "statusCheckRollup": rollup}}]},
            "reviews": {
                "nodes": [
                    {"id": r.id, "state": r.state, "body": r.body, "author": {"login": r.author}} for r in pr.reviews
                ]
            },
            "comments": {"nodes": [{"id": c.id, "body": c.body, "author": {"login": c.author}} for c in pr.comments]},
        }

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ident() -> dict[str, str]:
    import os

    return {
        **os.environ,
        "GIT_AUTHOR_NAME": "Forge",
        "GIT_AUTHOR_EMAIL": "forge@example.com",
        "GIT_COMMITTER_NAME": "Forge",
        "GIT_COMMITTER_EMAIL": "forge@example.com",
    }


class _Handler(BaseHTTPRequestHandler):
    server_forge: ForgeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _answer(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> None:
        data = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if isinstance(doc, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _serve(self) -> None:
        forge = self.server_forge
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                chunk = self.rfile.read(size + 2)[:size]
                if size == 0:
                    break
                raw += chunk
        else:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw.strip() else {}
        with forge.lock:
            forge.requests.append((self.command, self.path, body))
            if self.headers.get("Authorization", "").split()[-1:] != [TOKEN]:
                self._answer(401, {"message": "Bad credentials"})
                return
            if forge.failures:
                status, headers, doc = forge.failures.pop(0)
                self._answer(status, doc, headers)
                return
            if self.path == "/api/graphql" and self.command == "POST":
                self._answer(200, forge.graphql(body.get("query", ""), body.get("variables") or {}))
                return
            status, doc = forge.rest(self.command, self.path, body)
        self._answer(status, doc)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve
