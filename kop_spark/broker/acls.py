"""ACLs, as Kafka's simple authorizer keeps and applies them.

The bindings live in the metadata store under ``kafka/acls`` (one document, changed by CAS), so
every server on a store enforces the same rules, and a change needs no restart. A request is
allowed when some binding allows it and none denies it (deny wins); super users bypass both. As
in Kafka, allowing Read, Write, Delete or Alter also allows Describe, a literal ``*`` names every
resource of its type, and a ``Prefixed`` binding covers every name starting with it. Allowing
AlterConfigs allows DescribeConfigs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from ..errors import ConfigError
from ..retry import retry_cas
from ..storage.metadata_store import MetadataStore

OPERATIONS = (
    "Read",
    "Write",
    "Create",
    "Delete",
    "Alter",
    "Describe",
    "AlterConfigs",
    "DescribeConfigs",
    "IdempotentWrite",
    "All",
)
RESOURCE_TYPES = ("Topic", "Group", "Cluster", "TransactionalId")
PATTERN_TYPES = ("Literal", "Prefixed")
PERMISSIONS = ("Allow", "Deny")
CLUSTER = "kafka-cluster"  # the cluster resource's one name
_IMPLY_DESCRIBE = frozenset({"Read", "Write", "Delete", "Alter"})
_KEY = "kafka/acls"


class AclBinding(NamedTuple):
    principal: str  # User:NAME, or User:* for everyone
    permission: str  # Allow | Deny
    operation: str
    resource_type: str  # Topic | Group | Cluster | TransactionalId
    resource_name: str
    pattern_type: str = "Literal"

    def check(self) -> AclBinding:
        for value, allowed, what in (
            (self.permission, PERMISSIONS, "permission"),
            (self.operation, OPERATIONS, "operation"),
            (self.resource_type, RESOURCE_TYPES, "resource type"),
            (self.pattern_type, PATTERN_TYPES, "pattern type"),
        ):
            if value not in allowed:
                raise ConfigError(f"ACL {what} {value!r}: expected one of {', '.join(allowed)}")
        if not self.principal.startswith("User:") or len(self.principal) == len("User:"):
            raise ConfigError(f"ACL principal {self.principal!r}: expected User:NAME or User:*")
        if not self.resource_name:
            raise ConfigError("ACL resource name is empty")
        if self.resource_type == "Cluster" and (self.resource_name, self.pattern_type) != (CLUSTER, "Literal"):
            raise ConfigError(
                f"ACL on the cluster {self.resource_name!r}: the cluster's one name is {CLUSTER!r}, literal"
            )
        return self

    def covers(self, principal: str, resource_type: str, name: str) -> bool:
        if self.resource_type != resource_type or self.principal not in (principal, "User:*"):
            return False
        if self.pattern_type == "Prefixed":
            return name.startswith(self.resource_name)
        return self.resource_name in (name, "*")

    def grants(self, operation: str) -> bool:
        """Whether this binding speaks of ``operation`` (an Allow of Read speaks of Describe too)."""
        if self.operation in ("All", operation):
            return True
        if self.permission != "Allow":
            return False
        if operation == "DescribeConfigs":
            return self.operation == "AlterConfigs"
        return operation == "Describe" and self.operation in _IMPLY_DESCRIBE

    def __str__(self) -> str:
        return (
            f"{self.permission} {self.principal} {self.operation} on "
            f"{self.resource_type}:{self.pattern_type}:{self.resource_name}"
        )


class AclFilter(NamedTuple):
    """Which bindings a Describe or Delete of ACLs means, as Kafka's ``AclBindingFilter``: None is
    any value. Pattern ``Match`` means the bindings that apply to the resource named: literal ones
    of that name or ``*``, and prefixed ones whose prefix starts the name."""

    principal: str | None = None
    permission: str | None = None
    operation: str | None = None
    resource_type: str | None = None
    resource_name: str | None = None
    pattern_type: str = "Any"  # Any | Match | Literal | Prefixed

    def matches(self, b: AclBinding) -> bool:
        wanted = (self.principal, self.permission, self.operation, self.resource_type)
        have = (b.principal, b.permission, b.operation, b.resource_type)
        if any(w is not None and w != v for w, v in zip(wanted, have, strict=True)):
            return False
        if self.pattern_type == "Match":
            return self.resource_name is None or b.covers(b.principal, b.resource_type, self.resource_name)
        if self.pattern_type != "Any" and self.pattern_type != b.pattern_type:
            return False
        return self.resource_name is None or self.resource_name == b.resource_name


class Authorizer:
    """A snapshot of the bindings, with the super users, answering one question fast."""

    def __init__(self, bindings: Iterable[AclBinding], super_users: Iterable[str] = ()):
        self._bindings = tuple(bindings)
        self._super = frozenset(super_users)

    def allowed(self, principal: str, operation: str, resource_type: str, name: str) -> bool:
        if principal in self._super:
            return True
        relevant = [b for b in self._bindings if b.covers(principal, resource_type, name) and b.grants(operation)]
        return any(b.permission == "Allow" for b in relevant) and not any(b.permission == "Deny" for b in relevant)


class Acls:
    """The store's bindings: add, remove, list."""

    def __init__(self, store: MetadataStore):
        self._store = store

    def bindings(self) -> list[AclBinding]:
        value = self._store.get(_KEY).value or {}
        return [AclBinding(**b) for b in value.get("bindings", [])]

    def add(self, bindings: Iterable[AclBinding]) -> None:
        new = [b.check() for b in bindings]
        self._change(lambda current: current + [b for b in new if b not in current])

    def remove(self, bindings: Iterable[AclBinding]) -> int:
        """Remove the bindings given; how many there were."""
        return len(self._remove([set(bindings).__contains__])[0])

    def remove_matching(self, filters: Sequence[AclFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches, in one change; the bindings each filter matched."""
        return self._remove([f.matches for f in filters])

    def _remove(self, tests: Sequence[Callable[[AclBinding], bool]]) -> list[list[AclBinding]]:
        matched: list[list[AclBinding]] = []

        def without(current: list[AclBinding]) -> list[AclBinding]:
            matched[:] = [[b for b in current if test(b)] for test in tests]
            gone = {b for found in matched for b in found}
            return [b for b in current if b not in gone]

        self._change(without)
        return matched

    def _change(self, change: Callable[[list[AclBinding]], list[AclBinding]]) -> None:
        def attempt() -> None:
            current = self._store.get(_KEY)
            bindings = [AclBinding(**b) for b in (current.value or {}).get("bindings", [])]
            new = change(bindings)
            self._store.put(_KEY, {"bindings": [b._asdict() for b in new]}, current.version)

        retry_cas("ACLs", attempt)
