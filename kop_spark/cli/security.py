"""``kop users`` (kafka-configs --alter --add-config SCRAM-SHA-256=...) and ``kop acls``
(kafka-acls): the SASL users and the ACLs ``kop serve`` enforces, in the metadata store.

A password comes from ``--password-file`` (its first line), a prompt, or ``--password``; it is
salted and hashed at once, and never stored, printed or logged."""

from __future__ import annotations

import argparse
import getpass
import sys

from ..broker.acls import CLUSTER, OPERATIONS, AclBinding
from ..broker.credentials import MECHANISMS, MIN_ITERATIONS
from ..errors import ConfigError
from .common import at_least, open_broker


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"--password-file {args.password_file}: {e.strerror}") from None
    if args.password is not None:
        return str(args.password)
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass(f"Password for {args.name}: ")
    if getpass.getpass("Again: ") != first:
        raise ConfigError("the passwords differ")
    return first


def _users(args: argparse.Namespace) -> int:
    if args.action != "list" and not args.name:
        raise ConfigError(f"kop users {args.action}: a user name is required")
    with open_broker(args) as b:
        if args.action == "add":
            mechanisms = args.mechanism or ["SCRAM-SHA-256"]
            password = _password(args)
            for mechanism in mechanisms:
                b.users.add(args.name, mechanism, password, args.iterations)
            print(f"user {args.name}: credentials for {', '.join(mechanisms)} stored")
        elif args.action == "delete":
            if not b.users.delete(args.name):
                print(f"error: no user {args.name!r}", file=sys.stderr)
                return 1
            print(f"user {args.name}: deleted")
        else:
            for name, mechanisms in b.users.names().items():
                print(f"{name}\t{','.join(mechanisms)}")
    return 0


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    resources = [(rtype, name) for rtype, names in _named(args).items() for name in names]
    if args.cluster:
        resources.append(("Cluster", CLUSTER))
    if not resources:
        raise ConfigError("kop acls: name a resource with --topic, --group, --transactional-id or --cluster")
    principals = [("Allow", p) for p in args.allow_principal or ()] + [("Deny", p) for p in args.deny_principal or ()]
    if not principals:
        raise ConfigError("kop acls: name a principal with --allow-principal or --deny-principal User:NAME")
    pattern = args.resource_pattern_type.capitalize()
    return [
        AclBinding(principal, permission, op, rtype, name, pattern).check()
        for permission, principal in principals
        for op in args.operation or ["All"]
        for rtype, name in resources
    ]


def _named(args: argparse.Namespace) -> dict[str, list[str]]:
    """The resources named by type: --topic, --group and --transactional-id, as kafka-acls takes them."""
    named = {"Topic": args.topic, "Group": args.group, "TransactionalId": args.transactional_id}
    return {rtype: names for rtype, names in named.items() if names}


def _acls(args: argparse.Namespace) -> int:
    with open_broker(args) as b:
        if args.action == "add":
            added = _bindings(args)
            b.acls.add(added)
            for binding in added:
                print(f"added: {binding}")
        elif args.action == "remove":
            print(f"removed {b.acls.remove(_bindings(args))} ACL(s)")
        else:
            named = _named(args)
            for binding in b.acls.bindings():
                if not named or binding.resource_name in named.get(binding.resource_type, ()):
                    print(binding)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    users = sub.add_parser("users", help="SASL/SCRAM users of kop serve (kafka-configs --entity-type users)")
    users.add_argument("action", choices=["add", "list", "delete"])
    users.add_argument("name", nargs="?", default="")
    users.add_argument("--mechanism", action="append", choices=sorted(MECHANISMS), help="default SCRAM-SHA-256")
    users.add_argument("--password", help="visible in process listings: prefer --password-file or the prompt")
    users.add_argument("--password-file", help="a file whose first line is the password")
    users.add_argument("--iterations", type=at_least(MIN_ITERATIONS), default=MIN_ITERATIONS)
    users.set_defaults(run=_users)

    acls = sub.add_parser("acls", help="ACLs kop serve enforces with authorizationEnabled=true (kafka-acls)")
    acls.add_argument("action", choices=["add", "remove", "list"])
    acls.add_argument("--allow-principal", action="append", metavar="User:NAME")
    acls.add_argument("--deny-principal", action="append", metavar="User:NAME")
    acls.add_argument("--operation", action="append", choices=OPERATIONS)
    acls.add_argument("--topic", action="append")
    acls.add_argument("--group", action="append")
    acls.add_argument("--transactional-id", action="append")
    acls.add_argument("--cluster", action="store_true")
    acls.add_argument("--resource-pattern-type", choices=["literal", "prefixed"], default="literal")
    acls.set_defaults(run=_acls)
