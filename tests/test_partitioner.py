import os

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kop_spark.partitioner import murmur2, partition_for_key


def test_murmur2_matches_kafkas_java_values():
    # Values from Kafka's UtilsTest.testMurmur2 (Java).
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in cases.items():
        assert murmur2(key) == expected, key


def test_partition_matches_kafka_python():
    for i in range(500):
        key = os.urandom(i % 40)
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7
