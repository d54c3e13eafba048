"""PostgreSQL connection URLs as corral shows and scopes them, without importing a driver.

``redact`` hides a password wherever a URL or a ``key=value`` conninfo may carry one (the
``user:password@`` part, a ``password=`` parameter); ``schema_name`` is the PostgreSQL schema
that holds one project's rows, named from its state directory.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "****"

_SECRET_KEYS = frozenset({"password", "sslpassword"})


def is_postgres_url(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """``url`` with any password replaced by ``****``: safe to print, log or store in a message."""
    if is_postgres_url(url):
        parts = urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":" + MASK
            netloc = f"{userinfo}@{host}"
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            query = urlencode([(k, MASK if k.lower() in _SECRET_KEYS else v) for k, v in pairs], safe="*")
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    # A key=value conninfo: password='it''s' or password=plain.
    return re.sub(
        r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)",
        lambda m: m.group(1) + MASK,
        url,
        flags=re.IGNORECASE,
    )


def schema_name(state_dir_name: str) -> str:
    """The schema of the project keyed ``state_dir_name`` (its identity key; its state directory
    when it has no commit yet).

    ``corral_`` then the name in lowercase letters, digits and underscores; a name that would
    pass PostgreSQL's 63-byte limit keeps its start and a digest of the whole, so two state
    directories never share a schema.
    """
    clean = re.sub(r"[^a-z0-9_]+", "_", state_dir_name.lower()).strip("_") or "project"
    name = f"corral_{clean}"
    if len(name) > 63:
        digest = hashlib.sha256(state_dir_name.encode()).hexdigest()[:12]
        name = f"{name[:50]}_{digest}"
    return name
