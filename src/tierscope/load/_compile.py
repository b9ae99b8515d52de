"""Turn a validated workload and the caller's options into the native generator's configuration.

Design decision: everything that can fail because of user input fails here, in Python, with an
:class:`~tierscope.errors.InputError` naming the field: URLs are split and host names resolved
once (the engine receives IP addresses), templates are parsed, the mix becomes vectors. The
native side re-checks the document but should never be the one to refuse it.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tierscope.errors import InputError
from tierscope.spec.workload import Workload, parse_template

MODE_NATIVE = {"closed": "closed", "open": "open", "partly-open": "partly_open"}
CONNECTION_NATIVE = {
    "keep-alive": "keep_alive",
    "per-session": "per_session",
    "per-request": "per_request",
}
#: What ``level`` counts in each mode.
LEVEL_UNITS = {"closed": "users", "open": "requests/s", "partly-open": "sessions/s"}


@dataclass(frozen=True)
class Target:
    """One server: what the engine connects to and what requests say."""

    url: str
    addr: str
    host: str
    path_prefix: str


def split_url(url: str, field: str) -> tuple[str, int, str, str]:
    """``(host, port, host_header, path)`` of an ``http://`` URL; InputError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port or 80
    except ValueError as exc:
        raise InputError(field, url, f"an http:// URL ({exc})") from None
    if parts.scheme == "https":
        raise InputError(
            field,
            url,
            "an http:// URL (the load generator speaks plain HTTP/1.1; "
            "put TLS termination in front of it or test the backend)",
        )
    if parts.scheme != "http" or not parts.hostname:
        raise InputError(field, url, "an http://host[:port][/path] URL")
    if "{" in parts.netloc:
        raise InputError(field, url, "a URL whose host has no template placeholders")
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return parts.hostname, port, parts.netloc, path


def resolve(host: str, port: int, url: str, field: str) -> str:
    """``ip:port`` of ``host`` (IPv4 preferred, as a browser on loopback would)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InputError(field, url, f"a host name that resolves ({exc})") from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)
    family, _, _, _, sockaddr = infos[0]
    ip = sockaddr[0]
    return f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"


def targets_of(workload: Workload, base_urls: Sequence[str]) -> tuple[list[Target], list[Any]]:
    """The engine's targets (base URLs first) and, per interaction, its fixed target or None."""
    bases = list(base_urls) or workload.base_urls
    relative = [i.name for i in workload.interactions if i.url.startswith("/")]
    if relative and not bases:
        raise InputError(
            "base_url",
            None,
            f"a base URL for the relative URLs of {', '.join(relative)} "
            "(--base-url, or base_url in the workload)",
        )
    targets: list[Target] = []
    for k, url in enumerate(bases):
        host, port, netloc, path = split_url(url, f"base_urls[{k}]")
        if "?" in path:
            raise InputError(f"base_urls[{k}]", url, "a base URL without a query string")
        prefix = path.rstrip("/")
        targets.append(Target(url, resolve(host, port, url, f"base_urls[{k}]"), netloc, prefix))
    fixed: list[Any] = []
    by_netloc: dict[str, int] = {}
    for k, it in enumerate(workload.interactions):
        if it.url.startswith("/"):
            fixed.append(None)
            continue
        field = f"interactions[{k}].url"
        host, port, netloc, _ = split_url(it.url, field)
        if netloc not in by_netloc:
            origin = f"http://{netloc}"
            targets.append(Target(origin, resolve(host, port, it.url, field), netloc, ""))
            by_netloc[netloc] = len(targets) - 1
        fixed.append(by_netloc[netloc])
    return targets, fixed


def _path_template(url: str) -> str:
    if url.startswith("/"):
        return url
    rest = url.split("://", 1)[1]
    slash = rest.find("/")
    return rest[slash:] if slash >= 0 else "/"


def _parts(text: str, field: str) -> list[Any]:
    try:
        return parse_template(text)
    except ValueError as exc:
        raise InputError(field, text, str(exc)) from None


def native_config(
    workload: Workload,
    targets: list[Target],
    fixed: list[Any],
    *,
    n_base: int,
    level: float,
    ramp_up_s: float,
    steady_s: float,
    ramp_down_s: float,
    options: dict[str, Any],
) -> dict[str, Any]:
    """The JSON document ``tierscope._native.LoadRun`` takes."""
    chain = workload.chain()
    interactions = []
    for k, (it, tgt) in enumerate(zip(workload.interactions, fixed, strict=True)):
        at = f"interactions[{k}]"
        interactions.append(
            {
                "name": it.name,
                "method": it.method,
                "path": _parts(_path_template(it.url), f"{at}.url"),
                "headers": [[n, _parts(v, f"{at}.headers.{n}")] for n, v in it.headers.items()],
                "body": None if it.body is None else _parts(it.body, f"{at}.body"),
                "target": tgt,
            }
        )
    return {
        "mode": MODE_NATIVE[workload.mode],
        "level": float(level),
        "ramp_up_s": float(ramp_up_s),
        "steady_s": float(steady_s),
        "ramp_down_s": float(ramp_down_s),
        "think": workload.think_time.native(),
        "arrival": workload.arrival,
        "targets": [
            {"addr": t.addr, "host": t.host, "path_prefix": t.path_prefix} for t in targets
        ],
        "base_targets": n_base,
        "interactions": interactions,
        "mix": {
            "initial": chain.initial.tolist(),
            "transitions": chain.transitions.tolist(),
            "end": chain.end.tolist(),
            # Only open mode draws from it; elsewhere skip the linear algebra (whose BLAS
            # threads would otherwise spin beside the generator as it starts).
            "stationary": (
                chain.stationary() if workload.mode == "open" else chain.initial
            ).tolist(),
        },
        "connection": CONNECTION_NATIVE[workload.connection],
        **options,
    }
