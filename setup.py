"""The optional compiled twins: the record codec (kop_spark.record._crecords) and the ledger entry
check (kop_spark.storage._centries). Everything else is in pyproject.toml.

The extensions are optional: without a C compiler the install still succeeds and kop_spark runs on
its pure-Python codec, which gives identical results, only slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kop_spark.record._crecords",
            ["kop_spark/record/_crecords.c"],
            depends=["kop_spark/record/_native.h"],
            extra_compile_args=["-O3", "-std=c99", "-Wall", "-Wno-unused-function"],
            optional=True,
        ),
        Extension(
            "kop_spark.storage._centries",
            ["kop_spark/storage/_centries.c"],
            depends=["kop_spark/record/_native.h"],
            extra_compile_args=["-O3", "-std=c99", "-Wall"],
            optional=True,
        ),
    ]
)
