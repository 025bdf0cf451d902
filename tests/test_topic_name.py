import pytest

from kop_spark.errors import InvalidTopicError
from kop_spark.topic_name import TopicName


def test_kop_name_mapping():
    assert TopicName.parse("orders").full_name == "persistent://public/default/orders"
    assert TopicName.parse("orders", "t1", "ns1").full_name == "persistent://t1/ns1/orders"
    assert TopicName.parse("acme/sales/orders").full_name == "persistent://acme/sales/orders"
    assert TopicName.parse("persistent://acme/sales/orders") == TopicName("acme", "sales", "orders")
    assert TopicName.parse("orders").partition_name(3) == "persistent://public/default/orders-partition-3"
    assert TopicName.parse("acme/sales/o").kafka_name("public", "default") == "acme/sales/o"
    assert TopicName.parse("o").kafka_name("public", "default") == "o"


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "a b",
        "a/b",
        "../../etc",
        "a/../b",
        "x" * 250,
        "persistent://a/b",
        "non-persistent://a/b/c",
        "persistent://../b/c",
        "t/ns/..",
        "snow☃",
        "orders-partition-1",
        "a\x00b",
        "/abs",
    ],
)
def test_illegal_names_are_refused(name):
    with pytest.raises(InvalidTopicError):
        TopicName.parse(name)


def test_longest_legal_name():
    assert TopicName.parse("x" * 249).local_name == "x" * 249
