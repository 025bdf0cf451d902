"""The notebooks run unchanged as plain Python (each ends by checking what it showed)."""

import glob
import os
import runpy

import pytest

NOTEBOOKS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "notebooks", "*.py")))


def test_there_are_notebooks():
    assert [os.path.basename(n) for n in NOTEBOOKS] == [
        "01_quick_start.py",
        "02_exactly_once_pipeline.py",
        "03_consumer_group_lag.py",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs_as_plain_python(spark, tmp_path, monkeypatch, path):
    with open(path) as f:
        assert f.readline().strip() == "# Databricks notebook source"
    monkeypatch.setenv("KOP_ROOT", str(tmp_path / "store"))
    runpy.run_path(path, run_name="__main__")  # the same session: SparkSession.builder.getOrCreate()


class Widgets:
    """Databricks' ``dbutils.widgets``, as far as the notebooks use it: a text widget whose value
    the user has set (here: the test's store)."""

    def __init__(self, value: str):
        self.value = value
        self.defaults: dict[str, str] = {}

    def text(self, name: str, default: str, label: str = "") -> None:
        self.defaults[name] = default

    def get(self, name: str) -> str:
        assert name in self.defaults, f"widget {name!r} read before it was defined"
        return self.value


def test_on_databricks_the_root_comes_from_a_widget_defaulting_to_a_cloud_uri(spark, tmp_path, monkeypatch):
    monkeypatch.delenv("KOP_ROOT", raising=False)
    store = tmp_path / "store"
    widgets = Widgets(str(store))
    dbutils = type("DBUtils", (), {"widgets": widgets})()
    runpy.run_path(NOTEBOOKS[0], init_globals={"dbutils": dbutils, "display": lambda df: df.collect()})
    assert widgets.defaults["root"].split("://")[0] in ("s3", "abfss", "gs")
    assert (store / "_metadata").is_dir()  # the notebook's topics are in the widget's store


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebooks_register_the_source_themselves(path):
    """Spark's lookup of Python data sources runs once per session, before a notebook's %pip install."""
    with open(path) as f:
        assert "\nkop_spark.register(spark)" in f.read()
