"""``kop config``: every setting, its default and the value in effect (conf/kop.conf, ``--conf``),
for users who installed with pip and have no conf/kop.conf to read."""

from __future__ import annotations

import argparse

from ..config import Config, is_sensitive
from ..errors import ConfigError
from ..settings import SETTINGS, TOPIC_SETTINGS
from .common import key_values


def _config(args: argparse.Namespace) -> int:
    try:
        config = Config(key_values(args.conf, "--conf"))
    except ConfigError as e:
        raise ConfigError(f"--conf: {e}") from None
    for name, setting in SETTINGS.items():
        level = "topic" if name in TOPIC_SETTINGS else "broker"
        print(f"{name}={_shown(name, config[name])}\t(default {setting.default}; {level}) {setting.doc}")
    return 0


def _shown(name: str, value: object) -> object:
    # as a Kafka broker logs its config: a credential set shows as [hidden], never in clear
    return "[hidden]" if value and is_sensitive(name) else value


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    c = sub.add_parser("config", help="print every setting with its default and the value in effect")
    c.set_defaults(run=_config)
