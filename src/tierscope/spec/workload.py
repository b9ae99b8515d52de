"""Schema of the workload file that drives the load generator (``tierscope load``).

A workload says how load is offered (``mode``: closed users with think times, open arrivals at a
rate, or partly-open sessions), which requests exist (``interactions``: method, URL template with
random parameters, body, headers) and how users move between them (``mixes``: Markov transition
tables with session ends, RUBBoS/RUBiS style; ``mix`` picks one). A single URL is the degenerate
workload with one interaction.

Design decision: the document is plain nested dicts so that an experiment can merge overrides
over a base file (:func:`merge_workload`); pydantic checks each field, then :func:`parse_workload`
checks what needs the whole document (interaction names in mixes, rows summing to one, sessions
that end in partly-open mode) and reports every problem with its location, e.g.
``mixes.browse-only.transitions.home.stroy: unknown interaction``. URL templates are parsed here
(:func:`parse_template`), so a typo in ``{int:1:10O}`` is a file error, not a runtime one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tierscope.errors import SpecError
from tierscope.spec._load import load_yaml
from tierscope.spec._types import NonNegFloat, NonNegInt, PositiveFloat, PositiveInt, Probability

_STRICT = ConfigDict(extra="forbid", frozen=True)

#: Reserved target name in a transition row: the probability that the session ends there.
END = "end"
#: Rows and initial distributions may be off by this much (published tables are rounded);
#: they are normalised.
SUM_TOL = 1e-3
_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_METHOD = re.compile(r"^[A-Za-z]+$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")

Mode = Literal["closed", "open", "partly-open"]


# ---- templates ---------------------------------------------------------------------------------
def parse_template(text: str) -> list[dict[str, Any] | str]:
    """Split a URL/body/header template into parts for the native generator.

    Placeholders: ``{int:LO:HI}`` (uniform integer, inclusive), ``{choice:a|b|c}``, ``{user}``,
    ``{session}``, ``{request_id}``; ``{{`` and ``}}`` are literal braces. Returns parts such as
    ``{"lit": "/story?id="}``, ``{"int": [1, 10000]}``, ``"user"``. Raises ``ValueError`` with a
    message naming the bad placeholder.
    """
    parts: list[dict[str, Any] | str] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if text.startswith("{{", i) or text.startswith("}}", i):
            literal.append(ch)
            i += 2
            continue
        if ch == "}":
            raise ValueError(f"unmatched '}}' at position {i} (write '}}}}' for a literal brace)")
        if ch != "{":
            literal.append(ch)
            i += 1
            continue
        m = _PLACEHOLDER.match(text, i)
        if m is None:
            raise ValueError(f"unclosed '{{' at position {i} (write '{{{{' for a literal brace)")
        if literal:
            parts.append({"lit": "".join(literal)})
            literal = []
        parts.append(_placeholder(m.group(1)))
        i = m.end()
    if literal:
        parts.append({"lit": "".join(literal)})
    return parts


def _placeholder(body: str) -> dict[str, Any] | str:
    kind, _, args = body.partition(":")
    if kind in ("user", "session", "request_id") and not args:
        return kind
    if kind == "int":
        lo_hi = args.split(":")
        try:
            lo, hi = (int(v) for v in lo_hi)
        except ValueError:
            raise ValueError(f"{{{body}}}: expected {{int:LO:HI}} with integers") from None
        if hi < lo:
            raise ValueError(f"{{{body}}}: empty range (HI < LO)")
        return {"int": [lo, hi]}
    if kind == "choice":
        options = args.split("|")
        if not args or any(o == "" for o in options):
            raise ValueError(f"{{{body}}}: expected {{choice:a|b|...}} with non-empty options")
        return {"choice": options}
    raise ValueError(
        f"unknown placeholder {{{body}}} (expected int:LO:HI, choice:a|b, user, session, "
        "request_id; '{{' for a literal brace)"
    )


# ---- schema ------------------------------------------------------------------------------------
class ThinkTime(BaseModel):
    """Think time between a response and the user's next request."""

    model_config = _STRICT

    dist: Literal["exp", "uniform", "constant", "lognormal", "none"]
    mean: NonNegFloat | None = None
    low: NonNegFloat | None = None
    high: NonNegFloat | None = None
    scv: NonNegFloat | None = None

    @model_validator(mode="after")
    def _parameters_match(self) -> ThinkTime:
        need = {
            "exp": ("mean",),
            "constant": ("mean",),
            "lognormal": ("mean", "scv"),
            "uniform": ("low", "high"),
            "none": (),
        }[self.dist]
        missing = [p for p in need if getattr(self, p) is None]
        if missing:
            raise ValueError(f"think time '{self.dist}' needs {', '.join(missing)}")
        extra = [
            p
            for p in ("mean", "low", "high", "scv")
            if p not in need and getattr(self, p) is not None
        ]
        if extra:
            raise ValueError(f"think time '{self.dist}' takes no {', '.join(extra)}")
        if self.dist in ("exp", "lognormal") and self.mean == 0:
            raise ValueError(f"think time '{self.dist}' needs mean > 0 (or dist: none)")
        low, high = self.low, self.high
        if self.dist == "uniform" and low is not None and high is not None and high < low:
            raise ValueError("uniform think time needs low <= high")
        return self

    @property
    def mean_s(self) -> float:
        """Mean think time in seconds."""
        if self.dist == "none":
            return 0.0
        if self.dist == "uniform":
            assert self.low is not None and self.high is not None
            return (self.low + self.high) / 2
        assert self.mean is not None
        return self.mean

    def native(self) -> dict[str, Any] | None:
        """The law in the simulator's distribution format (None for no think time)."""
        if self.dist == "none" or self.mean_s == 0:
            return None
        if self.dist == "constant":
            return {"dist": "det", "mean": self.mean}
        if self.dist == "uniform":
            return {"dist": "uniform", "low": self.low, "high": self.high}
        if self.dist == "lognormal":
            return {"dist": "lognormal", "mean": self.mean, "scv": self.scv}
        return {"dist": "exp", "mean": self.mean}


class Interaction(BaseModel):
    """One kind of request."""

    model_config = _STRICT

    name: str
    method: str = "GET"
    url: str
    body: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Relative frequency when the workload has no mixes (independent draws).
    weight: PositiveFloat = 1.0

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME.match(v) or v == END:
            raise ValueError(
                f"interaction names use letters, digits, '_', '.', '-' and are not '{END}'"
            )
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: str) -> str:
        if not _METHOD.match(v):
            raise ValueError(f"not an HTTP method: {v!r}")
        return v.upper()

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not (v.startswith("/") or v.startswith("http://") or v.startswith("https://")):
            raise ValueError("a path starting with '/' or an absolute http:// URL")
        if any(c.isspace() for c in v):
            raise ValueError("URLs cannot contain spaces (write %20)")
        parse_template(v)
        return v

    @field_validator("body")
    @classmethod
    def _body(cls, v: str | None) -> str | None:
        if v is not None:
            parse_template(v)
        return v

    @field_validator("headers")
    @classmethod
    def _headers(cls, v: dict[str, str]) -> dict[str, str]:
        for name, value in v.items():
            if not name or any(c.isspace() or c == ":" or not c.isprintable() for c in name):
                raise ValueError(f"bad header name {name!r}")
            if name.lower() in ("host", "content-length", "x-request-id", "transfer-encoding"):
                raise ValueError(f"header {name!r} is set by the generator")
            if "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} value contains a line break")
            parse_template(value)
        return v


class Mix(BaseModel):
    """A Markov chain over the interactions (one user's navigation).

    ``initial`` gives the first interaction of a session; ``transitions[a][b]`` the probability
    of ``b`` after ``a``, and ``transitions[a].end`` the probability that the session ends after
    ``a`` (default ``end_probability``). Omitted ``initial`` or rows use the interactions'
    weights. A session that ends is followed by a new one (closed mode) or leaves (partly open).
    """

    model_config = _STRICT

    initial: dict[str, Probability] | None = None
    transitions: dict[str, dict[str, Probability]] = Field(default_factory=dict)
    end_probability: Probability = 0.0


class Workload(BaseModel):
    """A workload file (see the module docstring and docs/load.md)."""

    model_config = _STRICT

    name: str | None = None
    description: str | None = None
    mode: Mode = "closed"
    #: Default load level of each mode (overridden by the caller's level).
    users: NonNegInt | None = None
    rate: NonNegFloat | None = None
    session_rate: NonNegFloat | None = None
    arrival: Literal["poisson", "constant"] = "poisson"
    think_time: ThinkTime = ThinkTime(dist="none")
    #: Base URL(s) for relative interaction URLs (the caller may pass its own).
    base_url: str | list[str] | None = None
    connection: Literal["keep-alive", "per-session", "per-request"] = "keep-alive"
    #: Partly open: sessions in progress beyond which arrivals are turned away.
    max_sessions: PositiveInt | None = None
    interactions: list[Interaction] = Field(min_length=1)
    mixes: dict[str, Mix] = Field(default_factory=dict)
    mix: str | None = None

    @field_validator("think_time", mode="before")
    @classmethod
    def _think_number(cls, v: Any) -> Any:
        # A bare number is the mean of an exponential think time (the RUBBoS client's law).
        if isinstance(v, int | float) and not isinstance(v, bool):
            return {"dist": "exp", "mean": v} if v > 0 else {"dist": "none"}
        return v

    @property
    def base_urls(self) -> list[str]:
        """The workload's own base URLs (may be empty)."""
        if self.base_url is None:
            return []
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @property
    def mix_name(self) -> str | None:
        """The mix in use: ``mix``, or the only mix, or None (weights)."""
        if self.mix is not None:
            return self.mix
        if len(self.mixes) == 1:
            return next(iter(self.mixes))
        return None

    def default_level(self) -> float | None:
        """The level the file gives for its mode (users, requests/s or sessions/s)."""
        value = {"closed": self.users, "open": self.rate, "partly-open": self.session_rate}
        v = value[self.mode]
        return None if v is None else float(v)

    def chain(self) -> MarkovChain:
        """The chosen mix as vectors over the interactions (in file order)."""
        return _chain(self)


# ---- the Markov chain in vector form -----------------------------------------------------------
class MarkovChain:
    """Initial distribution, transition matrix and per-interaction end probabilities.

    ``transitions[i]`` sums to one (the next interaction if the session goes on); ``end[i]`` is
    the probability the session ends after interaction ``i``.
    """

    def __init__(
        self, names: list[str], initial: np.ndarray, transitions: np.ndarray, end: np.ndarray
    ) -> None:
        self.names = names
        self.initial = initial
        self.transitions = transitions
        self.end = end

    def stationary(self) -> np.ndarray:
        """Long-run fraction of requests per interaction, sessions restarting from ``initial``.

        This is the interaction mix a closed run converges to, and the mix of open-mode
        requests (which are drawn independently from it).
        """
        n = len(self.names)
        restart = (1 - self.end)[:, None] * self.transitions + self.end[:, None] * self.initial
        reach = _reachable(self.initial, restart)
        idx = np.flatnonzero(reach)
        P = restart[np.ix_(idx, idx)]
        m = idx.size
        A = np.vstack([P.T - np.eye(m), np.ones((1, m))])
        b = np.zeros(m + 1)
        b[-1] = 1.0
        pi_r, *_ = np.linalg.lstsq(A, b, rcond=None)
        if np.linalg.matrix_rank(A[:-1]) < m - 1 or np.abs(A @ pi_r - b).max() > 1e-9:
            # Several closed classes reachable: the long-run mix depends on where a user ends
            # up; average the distribution over many steps from the initial one.
            x = self.initial[idx].copy()
            acc = np.zeros(m)
            for _ in range(20_000):
                acc += x
                x = x @ P
            pi_r = acc / acc.sum()
        pi = np.zeros(n)
        pi[idx] = np.clip(pi_r, 0, None)
        return pi / pi.sum()

    def mean_session_requests(self) -> float:
        """Expected requests per session (inf if sessions need not end)."""
        D = (1 - self.end)[:, None] * self.transitions
        try:
            visits = self.initial @ np.linalg.inv(np.eye(len(self.names)) - D)
        except np.linalg.LinAlgError:
            return float("inf")
        total = float(visits.sum())
        return (
            total if np.isfinite(total) and total > 0 and (visits >= -1e-9).all() else float("inf")
        )


def _reachable(initial: np.ndarray, P: np.ndarray) -> np.ndarray:
    seen = initial > 0
    frontier = seen.copy()
    while frontier.any():
        nxt = (P[frontier] > 0).any(axis=0) & ~seen
        seen |= nxt
        frontier = nxt
    return seen


def _normalised(values: dict[str, float], names: list[str]) -> np.ndarray:
    v = np.array([values.get(n, 0.0) for n in names], dtype=float)
    return v / v.sum()


def _chain(w: Workload) -> MarkovChain:
    names = [i.name for i in w.interactions]
    weights = np.array([i.weight for i in w.interactions], dtype=float)
    weights /= weights.sum()
    name = w.mix_name
    if name is None:
        n = len(names)
        return MarkovChain(names, weights, np.tile(weights, (n, 1)), np.zeros(n))
    mix = w.mixes[name]
    initial = weights if mix.initial is None else _normalised(mix.initial, names)
    rows, end = [], []
    for a in names:
        row = mix.transitions.get(a)
        if row is None:
            rows.append(weights)
            end.append(mix.end_probability)
            continue
        e = row.get(END, mix.end_probability)
        rest = {k: v for k, v in row.items() if k != END}
        total = sum(rest.values())
        rows.append(_normalised(rest, names) if total > 0 else weights)
        end.append(e if total > 0 else 1.0)
    return MarkovChain(names, initial, np.vstack(rows), np.array(end, dtype=float))


# ---- whole-document checks ---------------------------------------------------------------------
def _cross_errors(w: Workload) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    names = [i.name for i in w.interactions]
    known = set(names)
    seen: set[str] = set()
    for k, it in enumerate(w.interactions):
        if it.name in seen:
            problems.append((f"interactions[{k}].name", f"duplicate interaction {it.name!r}"))
        seen.add(it.name)
    listing = ", ".join(names)
    for mname, mix in w.mixes.items():
        at = f"mixes.{mname}"
        if mix.initial is not None:
            for n in mix.initial:
                if n not in known:
                    problems.append((f"{at}.initial.{n}", f"unknown interaction ({listing})"))
            total = sum(mix.initial.values())
            if abs(total - 1) > SUM_TOL:
                problems.append((f"{at}.initial", f"must sum to 1, sums to {total:g}"))
        for a, row in mix.transitions.items():
            if a not in known:
                problems.append((f"{at}.transitions.{a}", f"unknown interaction ({listing})"))
            for b in row:
                if b not in known and b != END:
                    problems.append(
                        (f"{at}.transitions.{a}.{b}", f"unknown interaction ({listing}, {END})")
                    )
            total = sum(row.values())
            if row and abs(total - 1) > SUM_TOL:
                problems.append((f"{at}.transitions.{a}", f"must sum to 1, sums to {total:g}"))
    if w.mix is not None and w.mix not in w.mixes:
        choices = ", ".join(w.mixes) or "none defined"
        problems.append(("mix", f"unknown mix {w.mix!r} (mixes: {choices})"))
    elif w.mix is None and len(w.mixes) > 1:
        problems.append(("mix", f"several mixes ({', '.join(w.mixes)}): choose one with 'mix'"))
    if problems:
        return problems
    if w.mode == "partly-open":
        chain = w.chain()
        if not np.isfinite(chain.mean_session_requests()):
            where = f"mixes.{w.mix_name}" if w.mix_name else "mixes"
            problems.append(
                (
                    where,
                    "partly-open sessions must end: give end_probability > 0 "
                    "(or an 'end' entry in the rows a session can reach)",
                )
            )
    return problems


# ---- loading -----------------------------------------------------------------------------------
def _format_loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("str", "list[str]"):  # union tags of base_url say nothing to a user
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def parse_workload(data: Any, source: str = "<workload>") -> Workload:
    """Validate a decoded document as a :class:`Workload`.

    Raises :class:`~tierscope.errors.SpecError` listing every problem with its location.
    """
    try:
        w = Workload.model_validate(data)
    except ValidationError as exc:
        problems = [
            (_format_loc(e["loc"]), str(e["msg"]).removeprefix("Value error, "))
            for e in exc.errors()
        ]
        raise SpecError(source, problems) from None
    problems = _cross_errors(w)
    if problems:
        raise SpecError(source, problems)
    return w


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload file (YAML or JSON)."""
    return parse_workload(load_yaml(path), source=str(path))


def url_workload(url: str) -> Workload:
    """The one-interaction workload of a plain URL (``tierscope load http://...``)."""
    return parse_workload({"interactions": [{"name": "get", "url": url}]}, source=url)


def merge_workload(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` deep-merged over ``base`` (both plain dicts; neither is changed).

    Nested dicts merge key by key; lists (``interactions``) and distributions (a dict with a
    ``dist`` key, such as ``think_time``) are replaced whole, so ``{think_time: {dist: exp,
    mean: 0.5}}`` never inherits the ``low``/``high`` of a uniform base.
    """
    out = dict(base)
    for key, value in override.items():
        old = out.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and "dist" not in value:
            out[key] = merge_workload(old, value)
        else:
            out[key] = value
    return out
