"""The YCSB clients' keys against YCSB's definitions: FNV-1a 64 (its published test vector) over
the record number's eight bytes, made a non-negative long, as ``Utils.fnvhash64``; zipfian ranks
with constant 0.99 in the proportions 1/i^0.99 (the most popular records scattered over the
key space by the hash); latest favouring the newest records, this client's inserts included;
inserts numbered past the loaded records, apart per client."""

from __future__ import annotations

import numpy as np
import pytest

from tierscope.load.cassandra_worker import Keys, fnv_hash, key

OFFSET, PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a(data: bytes) -> int:
    h = OFFSET
    for byte in data:
        h = ((h ^ byte) * PRIME) & MASK
    return h


def test_fnv_is_ycsbs_hash() -> None:
    assert fnv1a(b"a") == 0xAF63DC4C8601EC8C  # the FNV reference's test vector
    for n in (0, 1, 255, 256, 123_456_789, 2**40 + 3):
        h = fnv1a(n.to_bytes(8, "little"))
        signed = h - (1 << 64) if h >= 1 << 63 else h
        assert fnv_hash(n) == abs(signed)
    assert key(7) == f"user{fnv_hash(7)}"


def test_zipfian_ranks_and_scrambled_keys() -> None:
    records, draws = 1000, 200_000
    keys = Keys(records, "zipfian", np.random.default_rng(1), index=0, clients=1)
    got = np.bincount([keys._rank() for _ in range(draws)], minlength=records)
    p = np.arange(1, records + 1, dtype=float) ** -0.99
    p /= p.sum()
    for rank in (0, 1, 9, 99):
        sd = (draws * p[rank] * (1 - p[rank])) ** 0.5
        assert abs(got[rank] - draws * p[rank]) < 4 * sd, (rank, got[rank], draws * p[rank])
    picked = np.array([keys.existing() for _ in range(20_000)])
    assert picked.min() >= 0 and picked.max() < records
    top = np.bincount(picked, minlength=records).argmax()
    assert top == fnv_hash(0) % records  # the most popular record is rank 0's, hashed


def test_latest_favours_the_newest_and_inserts_are_apart_per_client() -> None:
    keys = Keys(500, "latest", np.random.default_rng(2), index=1, clients=3)
    assert [keys.new() for _ in range(3)] == [501, 504, 507]
    assert keys.newest == 499 + 3 * 3
    picked = np.array([keys.existing() for _ in range(20_000)])
    assert picked.max() <= keys.newest
    assert np.bincount(picked).argmax() == keys.newest


@pytest.mark.parametrize("records", [10, 997])
def test_uniform_covers_the_records_evenly(records: int) -> None:
    keys = Keys(records, "uniform", np.random.default_rng(3), index=0, clients=1)
    counts = np.bincount([keys.existing() for _ in range(50 * records)], minlength=records)
    assert counts.size == records
    chi2 = ((counts - 50) ** 2 / 50).sum()
    assert chi2 < records + 5 * (2 * records) ** 0.5  # mean dof, sd sqrt(2 dof)
