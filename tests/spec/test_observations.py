"""The observation CSV of ``tierscope estimate``: layout from the header, checked values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tierscope.errors import InputError
from tierscope.estimate import Observations
from tierscope.spec.observations import classify_columns, load_observations_csv


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "obs.csv"
    p.write_text(text)
    return p


def test_layout_names_classes_and_stations_with_underscores() -> None:
    header = [
        "t",
        "x_view_story",
        "x_home",
        "u_db",
        "u_app_1",
        "r_home",
        "n_app_1_view_story",
        "dt",
    ]
    layout = classify_columns(header, "f.csv")
    assert layout.classes == ["view_story", "home"]
    assert layout.stations == ["db", "app_1"]
    assert layout.queue == {"app_1": {"view_story": "n_app_1_view_story"}}
    assert layout.response_time == {"home": "r_home"}
    assert layout.window == "dt"


def test_queue_columns_without_utilisations_take_the_prefix_as_station() -> None:
    layout = classify_columns(["x_a", "n_disk_a", "pop_a", "z_a"], "f.csv")
    assert layout.stations == ["disk"]
    assert layout.population == {"a": "pop_a"} and layout.think_time == {"a": "z_a"}


@pytest.mark.parametrize(
    ("header", "match"),
    [
        (["u_cpu"], "x_<class>"),
        (["x_a", "speed"], "speed"),
        (["x_a", "u_cpu", "n_disk_a"], "n_disk_a"),
        (["x_a", "x_a"], "each column once"),
        (["x_a", "r_b"], "r_b"),
    ],
)
def test_bad_headers_are_named(header: list[str], match: str) -> None:
    with pytest.raises(InputError, match=match):
        classify_columns(header, "f.csv")


def test_values_are_checked_with_their_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"line 3.*u_cpu.*\[0, 1\]"):
        load_observations_csv(write(tmp_path, "x_a,u_cpu\n1,0.5\n2,1.5\n"))
    with pytest.raises(InputError, match=r"line 2.*x_a"):
        load_observations_csv(write(tmp_path, "x_a,u_cpu\n,0.5\n"))
    with pytest.raises(InputError, match=r"n_cpu_a.*integer"):
        load_observations_csv(write(tmp_path, "x_a,u_cpu,n_cpu_a\n1,0.5,1.5\n"))
    with pytest.raises(InputError, match=r"pop_a.*same value"):
        load_observations_csv(write(tmp_path, "x_a,n_cpu_a,pop_a\n1,1,3\n1,1,4\n"))
    with pytest.raises(InputError, match=r"CSV|run folder"):
        load_observations_csv(tmp_path / "missing.csv")


def test_observations_from_a_csv(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "x_a,x_b,u_cpu,m_cpu,r_a,r_b,n_cpu_a,n_cpu_b,pop_a,pop_b,z_a,z_b,dt\n"
        "1,2,0.3,2,0.1,,1,0,3,2,1.0,1.0,10\n"
        "2,1,0.4,2,0.2,0.3,,,3,2,1.0,1.0,10\n",
    )
    layout, cols = load_observations_csv(path)
    obs = Observations.from_table(layout, cols, source=str(path))
    assert obs.throughput.tolist() == [[1, 2], [2, 1]]
    assert obs.busy.tolist() == [[0.6], [0.8]]
    assert np.isnan(obs.response_time[0, 1])
    assert obs.queue is not None and obs.queue.shape == (1, 1, 2)  # the blank row is dropped
    assert obs.population.tolist() == [[3, 2], [3, 2]]
    assert obs.think_time.tolist() == [1.0, 1.0]
    assert set(obs.available()) == {
        "throughput",
        "utilization",
        "response_time",
        "queue",
        "population",
    }
