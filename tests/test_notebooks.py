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
