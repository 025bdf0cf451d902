"""Spark's Kafka schemas: the source schema (derived from the Arrow one the readers build, so it is
defined once) and the checks of a DataFrame written to the sink."""

from __future__ import annotations

from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from ..errors import ConfigError
from ..record.arrow import kafka_source_schema


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema; ``headers`` only with ``includeHeaders=true``."""
    return from_arrow_schema(kafka_source_schema(include_headers))


_HEADERS: DataType = source_schema(True)["headers"].dataType


def check_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Refuse a DataFrame the Kafka sink would refuse, with its messages, before anything is written."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}

    def check(name: str, allowed: tuple[type, ...], expected: str) -> None:
        t = fields.get(name)
        if t is not None and not isinstance(t, allowed):
            raise ConfigError(f"{name} attribute type must be {expected}, not {t.simpleString()}")

    if "value" not in fields:
        raise ConfigError("Required attribute 'value' not found")
    check("value", (StringType, BinaryType), "a string or binary")
    check("key", (StringType, BinaryType), "a string or binary")
    if topic_option is None:
        if "topic" not in fields:
            raise ConfigError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
        check("topic", (StringType,), "a string")
    check("partition", (IntegerType,), "an int")
    check("timestamp", (TimestampType, TimestampNTZType), "a timestamp")
    headers = fields.get("headers")
    # simpleString leaves nullability out, as the Kafka sink's check does
    if headers is not None and headers.simpleString() != _HEADERS.simpleString():
        raise ConfigError(f"headers attribute type must be an {_HEADERS.simpleString()}, not {headers.simpleString()}")
