from pathlib import Path

import pytest

from kop_spark import Broker
from kop_spark.config import Config, render_conf_file
from kop_spark.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]


def test_conf_file_lists_every_setting_with_its_default():
    assert (REPO / "conf" / "kop.conf").read_text() == render_conf_file(), (
        "run: python -m kop_spark.config > conf/kop.conf"
    )


def test_precedence_defaults_then_file_then_code(tmp_path, monkeypatch):
    f = tmp_path / "kop.conf"
    f.write_text("# comment\nkafkaTenant = acme\nmanagedLedgerMaxEntriesPerLedger=10\n")
    monkeypatch.setenv("KOP_CONF", str(f))
    c = Config({"managedLedgerMaxEntriesPerLedger": 20})
    assert c["kafkaTenant"] == "acme"
    assert c["managedLedgerMaxEntriesPerLedger"] == 20
    assert c["offsetsTopicNumPartitions"] == 50


def test_unknown_setting_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("KOP_CONF", raising=False)
    with pytest.raises(ConfigError, match="managedLedgerMaxEntries"):
        Config({"managedLedgerMaxEntries": 5})
    f = tmp_path / "kop.conf"
    f.write_text("\nnoSuchSetting=1\n")
    with pytest.raises(ConfigError, match=r"noSuchSetting.*kop.conf:2"):
        Config(conf_file=str(f))


def test_malformed_value_names_setting_and_value():
    with pytest.raises(ConfigError, match=r"'lots'.*managedLedgerMaxEntriesPerLedger"):
        Config({"managedLedgerMaxEntriesPerLedger": "lots"})
    for policy in ("shred", "", ",", "compact,shred"):
        with pytest.raises(ConfigError, match=r"cleanup\.policy"):
            Config({"cleanup.policy": policy})
    with pytest.raises(ConfigError, match=r"journalSyncData"):
        Config({"journalSyncData": "maybe"})


@pytest.mark.parametrize("text", ["compact,delete", "delete,compact", " Delete , compact ", "compact,delete,compact"])
def test_a_cleanup_policy_is_a_list_in_any_order(text):
    # Kafka's cleanup.policy is a list: both orders mean the same, and are written back one way.
    assert Config({"cleanup.policy": text})["cleanup.policy"] == "compact,delete"


def test_broker_conf_reaches_topics(tmp_path):
    b = Broker(str(tmp_path), conf={"retention.ms": 1234, "kafkaNamespace": "ns1"})
    b.create_topic("t", 1, config={"retention.bytes": 99})
    d = b.describe_topic("t")
    assert d.full_name == "persistent://public/ns1/t"
    assert d.config["retention.ms"] == 1234 and d.config["retention.bytes"] == 99
    with pytest.raises(ConfigError, match="kafkaTenant"):
        b.create_topic("u", 1, config={"kafkaTenant": "x"})
