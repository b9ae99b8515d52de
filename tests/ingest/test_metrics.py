"""``tierscope import metrics``: long and wide metric tables as tools export them, times in any
common form, units read and said, bad values named by file, line and column (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.ingest import import_metrics
from tierscope.ingest.metrics import split_column
from tierscope.store import read_run

SOCKSHOP = Path(__file__).resolve().parents[2].parent / "shared" / "validation" / "sockshop"
CONTAINERS = {
    "carts", "carts-db", "catalogue", "catalogue-db", "front-end", "orders", "orders-db",
    "payment", "queue-master", "rabbitmq", "shipping", "user", "user-db",
}  # fmt: skip


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


def metrics_of(run_dir: Path) -> pl.DataFrame:
    run = read_run(run_dir)
    assert run.metrics is not None
    return run.metrics


@pytest.mark.parametrize(
    ("name", "component", "suffix"),
    [
        ("carts-db_cpu", "carts-db", "cpu"),
        ("carts_lat_50", "carts", "lat_50"),
        ("queue-master_mem", "queue-master", "mem"),
        ("my_svc_cpu_util", "my_svc", "cpu_util"),
        ("api.v2.cpu_cores", "api.v2", "cpu_cores"),
        ("db.rps", "db", "rps"),
    ],
)
def test_columns_split_at_the_longest_known_metric(name: str, component: str, suffix: str) -> None:
    col = split_column(name)
    assert col is not None and (col.component, col.suffix) == (component, suffix)
    assert split_column("carts_bogus") is None
    assert split_column("odd", {"odd": "front.cpu_util"}).component == "front"  # type: ignore[union-attr]


def test_a_sock_shop_export_imports_unchanged(tmp_path: Path) -> None:
    case = SOCKSHOP / "cases" / "carts-cpu-1"
    out, notes = import_metrics(
        tmp_path / "run", [case / "anomalous.csv"], baseline=[case / "normal.csv"]
    )
    raw = pl.read_csv(case / "anomalous.csv")
    m = metrics_of(out)
    assert set(m["tier"]) == CONTAINERS
    assert set(m["setup"]) == {"s0", "baseline"}
    assert set(m["metric"]) == {"cpu_cores", "mem_bytes", "throughput_s", "rt_p50", "rt_p90",
                                "rt_p99"}  # fmt: skip
    # CPU in percent of one core (the README): cores = percent / 100, row for row, 1 s apart
    carts = m.filter(pl.col("setup") == "s0", pl.col("tier") == "carts",
                     pl.col("metric") == "cpu_cores").sort("t")  # fmt: skip
    assert carts["value"].to_list() == pytest.approx((raw["carts_cpu"] / 100).to_list())
    assert carts["t"].diff().drop_nulls().to_list() == pytest.approx([1.0] * (raw.height - 1))
    mem = m.filter(pl.col("tier") == "carts-db", pl.col("metric") == "mem_bytes",
                   pl.col("setup") == "s0").sort("t")  # fmt: skip
    assert mem["value"].to_list() == pytest.approx(raw["carts-db_mem"].cast(float).to_list())
    assert any("percent of one core" in n for n in notes)
    assert any("epoch seconds" in n for n in notes)
    # the normal recording is earlier: the run's time 0 is its first row
    run = read_run(out)
    first = pl.read_csv(case / "normal.csv")["time"].min()
    assert run.spec.time_origin.startswith(  # type: ignore[union-attr]
        __import__("datetime")
        .datetime.fromtimestamp(first, tz=__import__("datetime").UTC)
        .isoformat()[:19]
    )


def test_times_in_milliseconds_and_with_a_space_and_no_zone(tmp_path: Path) -> None:
    ms = write(tmp_path / "ms.csv", """
time,web_cpu_util,db_cpu_util
1652812677000,0.5,0.25
1652812678000,0.6,0.30
""")  # fmt: skip
    iso = write(tmp_path / "iso.csv", """
timestamp,web_cpu_util
2022-05-17 18:37:57,0.5
2022-05-17 18:37:58.5,0.6
""")  # fmt: skip
    a = metrics_of(import_metrics(tmp_path / "a", [ms])[0])
    b = metrics_of(import_metrics(tmp_path / "b", [iso])[0])
    assert sorted(set(a["t"])) == [0.0, 1.0] and sorted(set(b["t"])) == [0.0, 1.5]
    # 1652812677 s is 2022-05-17T18:37:57Z: both runs start at the same instant
    assert read_run(tmp_path / "a").spec.time_origin == read_run(tmp_path / "b").spec.time_origin  # type: ignore[union-attr]
    paris = metrics_of(import_metrics(tmp_path / "c", [iso], tz="Europe/Paris")[0])
    assert sorted(set(paris["t"])) == [0.0, 1.5]
    assert read_run(tmp_path / "c").spec.time_origin == "2022-05-17T16:37:57+00:00"  # type: ignore[union-attr]


def test_units_are_read_and_said(tmp_path: Path) -> None:
    f = write(tmp_path / "u.csv", """
t,web_cpu,web_cpu_util,db_mem
0,0.40,45,1000
1,0.50,55,1000
""")  # fmt: skip
    out, notes = import_metrics(tmp_path / "run", [f], cpu_limit=["web=0.5"])
    m = metrics_of(out)
    cores = m.filter(pl.col("metric") == "cpu_cores")["value"].to_list()
    assert cores == pytest.approx([0.40, 0.50])  # at most 1.5: cores, and said so
    util = m.filter(pl.col("metric") == "cpu_util").sort("t", "value")["value"].to_list()
    # the cpu_util column in percent (/100), and cpu_util = cores / the 0.5-core limit
    assert sorted(util) == pytest.approx(sorted([0.45, 0.55, 0.8, 1.0]))
    assert any("read as cores" in n for n in notes)
    assert any("in percent, divided by 100: web_cpu_util" in n for n in notes)
    assert any("no CPU limit" in n for n in notes) is False  # web has one; db has no CPU
    # --cpu-unit decides where the data cannot
    out2, _ = import_metrics(tmp_path / "run2", [f], cpu_unit="fraction")
    assert "cpu_cores" not in set(metrics_of(out2)["metric"])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("time,web_cpu\n0,0.5\n1,abc\n", "line 3: field 'web_cpu': expected a number"),
        ("time,web_cpu\n0,0.5\n1,NaN\n", "line 3: field 'web_cpu': expected a number (NaN"),
        ("time,web_cpu\n0,0.5\n0,0.6\n", "line 3: field 'time': expected times increasing"),
        ("time,web_cpu\n1,0.5\n0,0.6\n", "line 3: field 'time': expected times increasing"),
        ("time,web_mem\n0,-5\n", "line 2: field 'web_mem': expected a value >= 0"),
        (
            "time,web_cpu_util\n0,0.5\n1,1.7\n",
            "line 3: field 'web_cpu_util': expected a utilisation",
        ),
        (
            "time,web_bogus\n0,1\n",
            "field 'web_bogus': expected a column named <component>_<metric>",
        ),
        ("when,web_cpu\n0,1\n", "field 'header': expected a time column"),
        ("time,web_cpu\n2022-05-17 18:37:57,1\nyesterday,2\n", "line 3: field 'time'"),
        ("time,web_cpu\n", "expected data rows"),
    ],
)
def test_bad_input_is_named_by_file_line_and_column(
    tmp_path: Path, text: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=words.replace("(", r"\(")):
        import_metrics(tmp_path / "run", [f])
    assert not (tmp_path / "run").exists()  # nothing written
    assert main(["import", "metrics", str(f), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "bad.csv" in err and "Traceback" not in err


def test_a_long_table_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path / "long.csv", """
ts,component,metric,value
2022-05-17T18:37:57Z,web,cpu_util,0.5
2022-05-17T18:37:57Z,db,cpu_util,0.9
2022-05-17T18:37:58Z,web,cpu_util,
2022-05-17T18:37:58Z,db,cpu_util,0.95
""")  # fmt: skip
    assert main(["import", "metrics", str(f), "--out", str(tmp_path / "run"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"] == {"metrics": 3} and set(doc["components"]) == {"web", "db"}
    assert any("1 empty values" in n for n in doc["notes"])
    assert doc["time_origin"] == "2022-05-17T18:37:57+00:00"


PETSHOP = SOCKSHOP.parent / "petshop"


def test_a_pandas_multi_level_header_and_an_adjacency_graph(tmp_path: Path) -> None:
    """PetShop's metrics.csv (pandas column levels: component, metric, statistic; an index-name
    row) and graph.csv (row calls column), as its README describes them: 42 components with 44
    calls in low_traffic, rows 300 s apart, requests per interval, availability in percent."""
    issue = PETSHOP / "low_traffic" / "test" / "issue_0"
    out, notes = import_metrics(
        tmp_path / "run", [issue / "metrics.csv"], graph=PETSHOP / "low_traffic" / "graph.csv"
    )
    assert main(["import", "metrics", str(issue / "metrics.csv"), "--out", str(tmp_path / "cli"),
                 "--graph", str(PETSHOP / "low_traffic" / "graph.csv")]) == 0  # fmt: skip
    assert read_run(tmp_path / "cli").graph == read_run(out).graph
    run = read_run(out)
    assert run.metrics is not None and not run.graph.inferred
    assert len(run.graph.components) == 42 and len(run.graph.edges()) == 44
    assert not run.graph.callers("PetSite")  # PetSite has only outgoing edges
    m = run.metrics
    assert set(m["metric"]) == {"rt_mean", "rt_p50", "rt_p90", "rt_p95", "rt_p99",
                                "throughput_s", "availability"}  # fmt: skip
    assert sorted(set(m["t"])) == [0.0, 300.0, 600.0, 900.0, 1200.0]
    raw = issue / "metrics.csv"
    lines = raw.read_text().splitlines()
    names = lines[0].split(",")
    stats = lines[2].split(",")
    col = next(i for i, (n, s) in enumerate(zip(names, stats, strict=True))
               if n == "PetSite" and s == "Sum")  # fmt: skip
    first_sum = float(lines[4].split(",")[col])
    site = m.filter(pl.col("tier") == "PetSite", pl.col("metric") == "throughput_s").sort("t")
    assert site["value"][0] == pytest.approx(first_sum / 300)  # requests per 300 s row
    avail = m.filter(pl.col("metric") == "availability")["value"]
    assert avail.min() >= 0 and avail.max() <= 1  # percent, divided by 100
    assert any("divided by the rows' step (300 s)" in n for n in notes)
    assert any("call graph from graph.csv: 44 calls" in n for n in notes)


def test_force_replaces_a_run_folders_own_files_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path / "m.csv", "time,web_cpu_util\n0,0.5\n1,0.6\n")
    out = tmp_path / "run"
    assert main(["import", "metrics", str(f), "--out", str(out)]) == 0
    (out / "mine.txt").write_text("kept")
    assert main(["import", "metrics", str(f), "--out", str(out)]) == 2  # not empty
    assert "a new or empty folder" in capsys.readouterr().err
    g = write(tmp_path / "g.csv", "time,db_cpu_util\n0,0.9\n1,0.95\n")
    assert main(["import", "metrics", str(g), "--out", str(out), "--force"]) == 0
    assert set(metrics_of(out)["tier"]) == {"db"}  # the new data, not the old
    assert (out / "mine.txt").read_text() == "kept"  # nothing else deleted
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    assert main(["import", "metrics", str(g), "--out", str(other), "--force"]) == 2
    assert "no run.json" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["notes.txt"]


def test_a_memory_limit_makes_mem_util_of_the_components_nodes(tmp_path: Path) -> None:
    f = write(tmp_path / "m.csv", """
ts,tier,node,metric,value
0,cart,cart-1,mem_bytes,268435456
0,cart,cart-2,mem_bytes,268435456
1,cart,cart-1,mem_bytes,536870912
1,cart,cart-2,mem_bytes,268435456
""")  # fmt: skip
    out, notes = import_metrics(tmp_path / "run", [f], mem_limit=["cart=1Gi"])
    util = metrics_of(out).filter(pl.col("metric") == "mem_util").sort("t")
    assert util["value"].to_list() == pytest.approx([0.5, 0.75])  # (256+256, 512+256) MiB of 1 GiB
    assert "mem_util of cart from --mem-limit" in notes
    for bad in ("cart=lots", "cart=0", "shop=1G", "1G"):
        with pytest.raises(InputError) as err:
            import_metrics(tmp_path / "bad", [f], mem_limit=[bad])
        assert err.value.field == "--mem-limit"
