"""Soak the tests whose assertions depend on timing or on real systems: run them N times in a row
beside a CPU hog and print each test's pass rate (``make soak``; ``python -m tests.soak --help``).

A test that depends on timing or on processes of this host (marker ``timing``; every
``real_system`` test has it too) must pass every run here before it lands: CI runs on a 2-core
machine that other work shares. The hog is a busy loop on one core, as ``stress --cpu 1`` would
run; the Rust load-generator tests (``cargo test loadgen``) can be soaked the same way.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _spin() -> None:  # pragma: no cover - runs in the hog process
    while True:
        pass


def _pytest_outcomes(xml: Path, why: dict[str, list[str]]) -> dict[str, str]:
    """Each test's outcome; the first line of each failure's message goes to ``why``."""
    out: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        failed = [c for c in case if c.tag in ("failure", "error")]
        if failed:
            out[name] = "failed"
            why[name].append((failed[0].get("message") or "").splitlines()[0][:200])
        elif any(c.tag == "skipped" for c in case):
            out[name] = "skipped"
        else:
            out[name] = "passed"
    return out


def _cargo_outcomes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("test ") and line.rstrip().endswith(("ok", "FAILED", "ignored")):
            name, _, result = line[5:].rpartition(" ... ")
            out[f"cargo::{name}"] = {"ok": "passed", "FAILED": "failed"}.get(
                result.strip(), "skipped"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="repetitions (default 20)")
    parser.add_argument("--hogs", type=int, default=1, help="busy-loop processes (default 1)")
    parser.add_argument("--cargo", action="store_true", help="soak `cargo test loadgen` too")
    parser.add_argument("--no-pytest", action="store_true", help="only the cargo tests")
    args, pytest_args = parser.parse_known_args(argv)  # the rest selects tests (-m timing)

    hogs = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.hogs)]
    for h in hogs:
        h.start()
    rates: dict[str, list[str]] = defaultdict(list)
    why: dict[str, list[str]] = defaultdict(list)
    durations: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.runs):
                started = time.monotonic()
                if not args.no_pytest:
                    xml = Path(tmp) / f"run{i}.xml"
                    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           f"--junitxml={xml}", *(pytest_args or ["-m", "timing"])]  # fmt: skip
                    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
                    if xml.exists():
                        for name, outcome in _pytest_outcomes(xml, why).items():
                            rates[name].append(outcome)
                if args.cargo:
                    proc = subprocess.run(
                        ["cargo", "test", "--manifest-path", "native/Cargo.toml",
                         "--no-default-features", "loadgen"],
                        cwd=ROOT, capture_output=True, text=True, check=False,
                    )  # fmt: skip
                    for name, outcome in _cargo_outcomes(proc.stdout).items():
                        rates[name].append(outcome)
                durations.append(time.monotonic() - started)
                failed = sorted(n for n, o in rates.items() if o[-1:] == ["failed"])
                print(f"run {i + 1}/{args.runs}: {durations[-1]:.0f} s, "
                      f"{len(failed)} failed {' '.join(failed)}", flush=True)  # fmt: skip
    finally:
        for h in hogs:
            h.kill()
    print(f"\n{'passed':>8} {'failed':>7} {'skipped':>8}  test  (hogs: {args.hogs}, "
          f"cores: {os.cpu_count()}, runs: {args.runs})")  # fmt: skip
    worst = 0
    for name in sorted(rates, key=lambda n: (-rates[n].count("failed"), n)):
        o = rates[name]
        worst = max(worst, o.count("failed"))
        print(f"{o.count('passed'):>8} {o.count('failed'):>7} {o.count('skipped'):>8}  {name}")
        for message in why.get(name, [])[:3]:
            print(f"{'':26}{message}")
    return 1 if worst else 0


if __name__ == "__main__":
    sys.exit(main())
