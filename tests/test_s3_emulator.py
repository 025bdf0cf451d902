"""The S3 emulator the object-store tests run on (moto's server, by ``moto_s3_process.py``) lets one
of several racing conditional writes win, as S3 does: with moto as it comes, two could, and a test of
writers sharing a partition lost an append to the emulator rather than to kop."""

import os
import threading

import obstore
from obstore.store import S3Store

from kop_spark.storage.object_store import CONDITION_FAILED

from .servers import BUCKET, make_bucket, moto_s3, s3_env, start_on_a_free_port


def test_one_of_racing_conditional_writes_wins(tmp_path, monkeypatch):
    # Threads switching every microsecond: moto as it comes let two writers win 8 keys in 100.
    server = start_on_a_free_port(
        lambda workdir: moto_s3(workdir, {**os.environ, "KOP_SWITCH_INTERVAL": "1e-6"}), tmp_path
    )
    try:
        for name, value in s3_env(server.port).items():  # as the other tests' stores have them
            monkeypatch.setenv(name, value)
        make_bucket(server.port)
        store = S3Store(BUCKET, client_options={"allow_http": True})
        winners = []
        for k in range(100):
            etag = obstore.put(store, f"k{k}", b"base", mode="create")["e_tag"]
            winners.append(_racing_updates(store, f"k{k}", etag))
        assert winners == [1] * 100
    finally:
        server.stop()


def _racing_updates(store: S3Store, key: str, etag: str | None, writers: int = 8) -> int:
    """How many of ``writers`` threads, started together, each updated ``key`` if it still had ``etag``."""
    won: list[int] = []
    start = threading.Barrier(writers)

    def update(i: int) -> None:
        start.wait()
        try:
            obstore.put(store, key, b"%d" % i, mode={"e_tag": etag})
            won.append(i)
        except CONDITION_FAILED:  # lost the compare-and-set (any other error is not counted: the test fails)
            pass

    threads = [threading.Thread(target=update, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(won)
