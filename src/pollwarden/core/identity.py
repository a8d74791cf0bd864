"""One job, one identity: a job id or a status URL in the one spelling admission stores, looks up and sends.

Whoever respells a job (a status URL with `&x=1` added, its query reordered, `%61` for `a`, a trailing `/`,
another path case where the provider reads paths without case; a numeric id as `042`, `+42` or `42.0`) must
find the operation that job already has, and its budget, never a fresh one. The contract says what its provider
reads alike (`[status] identity_query`, `[status] path_case`, `[fields] job_id_type`: `JobIdentity`); RFC 3986's
syntax-based normalisation (section 6.2.2: case of the scheme, host and escapes, unreserved characters decoded,
the default port) holds for every status URL. Admission (`WatchRequest`) canonicalises before it checks, looks
up or stores anything, so every interface gets it; what is stored is what is sent.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..errors import PollwardenError
from .contract.model import JOB_PATH, Contract, JobIdentity
from .contract.reader import ASCII_LOWER, DEFAULT_PORTS, Reader, canonical_origin, origin_key

IDENTITY_KEYS = frozenset({"identity_query", "path_case"})
"""The `[status]` keys read here (`[fields] job_id_type` is the third)."""

PATH_CASES = ("sensitive", "insensitive")
ID_TYPES = ("string", "integer")

_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_PRINTABLE = re.compile(r"[!-~]*")
_QUERY_NAME = re.compile(r"[A-Za-z0-9._~-]+")
_INTEGER = re.compile(r"\+?([0-9]+)(?:\.0+)?")


class NotOneJob(PollwardenError, ValueError):
    """A job id or status URL that cannot be read as one job; the message says why, for the field it names."""


def parse_job_identity(r: Reader, *, status_url_handles: bool) -> JobIdentity:
    """`[status] identity_query` and `path_case`, `[fields] job_id_type`, each complaint naming its key."""
    status, fields = r.table("status"), r.table("fields")
    query: tuple[str, ...] | None = None
    if "identity_query" in status.data:
        raw = status.data["identity_query"]
        if not isinstance(raw, list) or not all(isinstance(name, str) for name in raw):
            raise status.fail("identity_query", 'must be a list of query parameter names, like ["api-version"]')
        for name in raw:
            if not _QUERY_NAME.fullmatch(name):
                raise status.fail(
                    "identity_query", f"{name!r}: a name may only use letters, digits, '.', '_', '~', '-'"
                )
            if raw.count(name) > 1:
                raise status.fail("identity_query", f"{name!r} is listed twice")
        if not status_url_handles:
            raise status.fail(
                "identity_query",
                "names the query of a status URL the provider returned: it needs status_url_handles = true",
            )
        query = tuple(raw)
    path_case = status.text("path_case") or "sensitive"
    if path_case not in PATH_CASES:
        raise status.fail("path_case", f"must be 'sensitive' or 'insensitive', got {path_case!r}")
    id_type = fields.text("job_id_type") or "string"
    if id_type not in ID_TYPES:
        raise fields.fail("job_id_type", f"must be 'string' or 'integer', got {id_type!r}")
    return JobIdentity(query=query, path_case=path_case, id_type=id_type)


def canonical_job_id(contract: Contract, job_id: str) -> str:
    """The id in the one spelling the provider reads it in; NotOneJob says why it cannot be a job id."""
    identity = contract.job_identity
    if identity.id_type == "integer":
        match = _INTEGER.fullmatch(job_id)
        if match is None:
            raise NotOneJob(
                f'must be a whole number, like 42 (contract {contract.name!r} says [fields].job_id_type = "integer")'
            )
        return str(int(match.group(1)))
    if identity.path_case == "insensitive" and _job_in_path(contract):
        return job_id.translate(ASCII_LOWER)
    return job_id


def _job_in_path(contract: Contract) -> bool:
    path = contract.status_url.partition("?")[0]
    return "{job_id}" in path or JOB_PATH in path


def canonical_status_url(contract: Contract, url: object) -> str:
    """The status URL as admission stores it and the client sends it; NotOneJob says why it cannot be polled.
    The one place a status URL handed in by a person, an API caller, an agent or a submission's answer is read,
    so none of them takes the credential off the contract's origin or names one job twice."""
    if not isinstance(url, str) or not url:
        raise NotOneJob("must be the absolute status URL the provider returned")
    if not _PRINTABLE.fullmatch(url):
        raise NotOneJob("holds a space, a control or a non-ASCII character; give the URL as the provider returned it")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise NotOneJob("is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise NotOneJob("must be an absolute http(s) URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise NotOneJob("must not carry userinfo (user:password@)")
    if parts.fragment or "#" in url:
        raise NotOneJob("must not carry a fragment")
    if origin_key(scheme, parts.hostname, port) != canonical_origin(contract.origin):
        raise NotOneJob(f"is not on {contract.origin}, the origin contract {contract.name!r} binds its credential to")
    identity = contract.job_identity
    fold = identity.path_case == "insensitive"
    path = _normalised(parts.path, fold=fold) or "/"
    if any(segment in {".", ".."} for segment in path.split("/")):
        raise NotOneJob("holds a dot segment")
    if identity.query is None:  # RFC 3986's equivalences only: the order and every parameter may mean something
        query = "&".join(_parameter(piece) for piece in parts.query.split("&")) if parts.query else ""
    else:  # the provider reads a status URL as the job it names: `a//b/` is `a/b`, the query only its own
        path = "/" + "/".join(segment for segment in path.split("/") if segment)
        query = _identity_query(contract, parts.query, identity.query, fold=fold)
    # The contract's own spelling of its origin: the client sends the credential only to that very string.
    canonical = contract.origin + path
    return canonical + "?" + query if query else canonical


def _normalised(text: str, *, fold: bool) -> str:
    """Escapes of unreserved characters decoded, every other escape in upper-case hex; ASCII letters folded to
    lower case when `fold` (never an escape's hex: `%2f` is `%2F` either way). Regular expressions, not a loop
    over characters: a bulk enqueue of status URLs runs this for each."""
    if fold:
        text = text.translate(ASCII_LOWER)
    if "%" not in text:
        return text
    if _STRAY_PERCENT.search(text):
        raise NotOneJob("holds a '%' that is not followed by two hex digits")

    def one(match: re.Match[str]) -> str:
        decoded = chr(int(match.group(1), 16))
        if decoded in _UNRESERVED:
            return decoded.translate(ASCII_LOWER) if fold else decoded
        return match.group(0).upper()

    return _ESCAPE.sub(one, text)


def _parameter(piece: str) -> str:
    """One `name=value` of a query with its escapes normalised (`=` and `&` themselves are never decoded)."""
    try:
        return "=".join(_normalised(part, fold=False) for part in piece.split("="))
    except NotOneJob as exc:
        raise NotOneJob(f"its query {exc}") from None


def _identity_query(contract: Contract, query: str, names: Sequence[str], *, fold: bool) -> str:
    """Only (and each of) the parameters `[status] identity_query` names, spelt as the contract spells them, empty
    ones dropped, in one order."""
    pairs: list[tuple[str, str]] = []
    for piece in query.split("&"):
        name, _, value = _parameter(piece).partition("=")
        if name and value:
            pairs.append((name, value))
    return "&".join(f"{name}={value}" for name, value in sorted(_identity_pairs(contract, pairs, names, fold=fold)))


def _identity_pairs(
    contract: Contract, pairs: Sequence[tuple[str, str]], names: Sequence[str], *, fold: bool
) -> list[tuple[str, str]]:
    def key(name: str) -> str:
        return name.translate(ASCII_LOWER) if fold else name

    wanted = {key(name): name for name in names}
    kept = [(wanted[key(name)], value) for name, value in pairs if key(name) in wanted]
    for name in names:
        count = sum(1 for given, _ in kept if given == name)
        if count == 0:
            raise NotOneJob(
                f"lacks the query parameter {name!r}, which contract {contract.name!r} names as part of the job"
                " ([status].identity_query)"
            )
        if count > 1:
            raise NotOneJob(f"gives the query parameter {name!r} twice; give it once")
    return kept


@dataclass(frozen=True)
class Canonical:
    """A request's job in its one spelling: the job id, the status URL (or None), and what could not be read."""

    job_id: object
    status_location: object
    problems: tuple[tuple[str, str], ...] = ()
    """(field, why) for each part that cannot name a job: `job_id` or `status_location`."""


def canonical_job(contract: Contract, job_id: object, status_location: object) -> Canonical:
    """The job a request names, in its one spelling. A status URL names the job by itself: it is the job id unless
    another one is given; under a contract that takes status URLs a job id alone is the URL it stands for, so
    `--job PATH` and `--status-url URL` are one job. What cannot be read is kept as given, with its problem."""
    location, where = status_location, "status_location"
    if location is None and isinstance(job_id, str) and contract.status_url_handles and _url_names_job(contract):
        try:
            location, where = contract.status_url_for(job_id), "job_id"
        except ValueError:
            location = None  # an id that cannot fill the path: admission's job id checks say why
    if location is not None:
        try:
            url = canonical_status_url(contract, location)
        except NotOneJob as exc:
            given = job_id if job_id is not None else status_location
            return Canonical(given, status_location, ((where, str(exc)),))
        if job_id is None or job_id in (location, url) or where == "job_id":
            return Canonical(url, url)
        location = url  # a job id of its own beside the URL: read as any job id is
    if isinstance(job_id, int) and not isinstance(job_id, bool) and contract.job_identity.id_type == "integer":
        job_id = str(job_id)  # a JSON number from an agent or an API caller: the id it names
    if not isinstance(job_id, str):
        return Canonical(job_id, location)
    try:
        return Canonical(canonical_job_id(contract, job_id), location)
    except NotOneJob as exc:
        return Canonical(job_id, location, (("job_id", str(exc)),))


def _url_names_job(contract: Contract) -> bool:
    """The status URL itself names the job (not a POST body only, as Textract's does)."""
    body = contract.status.body
    return body is None or "{job_id}" not in body


__all__ = [
    "IDENTITY_KEYS",
    "Canonical",
    "NotOneJob",
    "canonical_job",
    "canonical_job_id",
    "canonical_status_url",
    "parse_job_identity",
]
