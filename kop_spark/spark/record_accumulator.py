"""A sink task's records held until they make full batches, as Kafka's ``RecordAccumulator`` holds a
producer's records until a partition's batch fills.

Spark hands a task its rows in Arrow batches of ``spark.sql.execution.arrow.maxRecordsPerBatch``
(10,000) rows. Spread over a topic of many partitions, each gives every partition a sliver (about 80
records at 128 partitions), and each sliver encoded as a batch of its own costs a ledger entry, its
framing and a staged write: at 128 partitions a task spent five times as long a record as at two. So a
topic's rows, their partitions chosen, are held until there are enough for every partition to fill a
quarter of a batch on average (the sink says how many bytes that is), or until the task holds
``buffer.memory`` (the producer's name for what its unsent records may take). Not a whole batch:
the held rows are copied into one set of columns to be encoded, and holding more measured slower at
32 partitions, where a quarter is about one Arrow batch. A topic of few partitions gets there with
every Arrow batch, which is then encoded as it comes, with no copy.
"""

from __future__ import annotations

import pyarrow as pa

Rows = dict[str, pa.Array]  # a topic's columns by name, ``partition`` the one chosen for each row


class RecordAccumulator:
    """Rows held per topic, handed back to be encoded once there are enough of them."""

    def __init__(self, buffer_memory: int):
        self._buffer_memory = buffer_memory
        self._held: dict[str, list[Rows]] = {}
        self._bytes: dict[str, int] = {}

    def append(self, topic: str, rows: Rows, full_at: int) -> list[tuple[str, Rows]]:
        """Hold ``rows`` of ``topic``; return what is to be encoded now: the topic's rows once they
        reach ``full_at`` bytes, every topic's once the task holds ``buffer.memory``."""
        self._held.setdefault(topic, []).append(rows)
        size = self._bytes[topic] = self._bytes.get(topic, 0) + sum(column.nbytes for column in rows.values())
        if size >= full_at:
            return [(topic, self._take(topic))]
        if sum(self._bytes.values()) >= self._buffer_memory:
            return self.drain()
        return []

    def drain(self) -> list[tuple[str, Rows]]:
        """Every topic's rows held, in the order the topics came."""
        return [(topic, self._take(topic)) for topic in list(self._held)]

    def _take(self, topic: str) -> Rows:
        held = self._held.pop(topic)
        del self._bytes[topic]
        if len(held) == 1:
            return held[0]
        return {name: pa.concat_arrays([rows[name] for rows in held]) for name in held[0]}
