"""Compare-and-set of the file metadata store, including across processes."""

import subprocess

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from kop_spark import layout
from kop_spark.clock import ManualClock
from kop_spark.errors import BadVersionError
from kop_spark.storage.metadata.file import FileMetadataStore
from kop_spark.storage.metadata_store import PROBED_MAX_AGE_S, ProbedCache, check_key

from .conftest import PYTHON, python_subprocess_env


def test_cas_create_update_delete(tmp_path):
    s = FileMetadataStore(str(tmp_path))
    assert s.get("a/b") == (None, 0)
    v = s.create("a/b", {"n": 1})
    with pytest.raises(BadVersionError):
        s.create("a/b", {"n": 2})
    v2 = s.put("a/b", {"n": 2}, v)
    with pytest.raises(BadVersionError):
        s.put("a/b", {"n": 3}, v)  # stale
    v3 = s.put("a/b", None, v2)
    assert s.get("a/b") == (None, v3)
    assert s.create("a/b", {"n": 4}) == v3 + 1
    assert s.list_keys("a") == ["a/b"]


def test_stale_version_loses_even_after_its_successor_was_pruned(tmp_path):
    s = FileMetadataStore(str(tmp_path))
    v = s.create("k", {"n": 0})
    stale = v
    for i in range(20):
        v = s.put("k", {"n": i}, v)
    # The file of version stale+1 is long gone; linking it again must not count as a win.
    with pytest.raises(BadVersionError):
        s.put("k", {"n": -1}, stale)
    assert s.get("k").value == {"n": 19}


def test_illegal_keys_are_refused(tmp_path):
    s = FileMetadataStore(str(tmp_path))
    for key in ("../x", "a//b", "a/./b", "a b"):
        with pytest.raises(ValueError):
            s.get(key)


@given(st.text(max_size=20), st.text(max_size=20))  # at most 241 bytes escaped
@example(".", "..")
@example("a-41:", "aA:")  # a "-" that could read as an escape
@example("-g", "g")
def test_any_name_is_one_key_segment_read_back_as_it_was(name: str, other: str) -> None:
    """Group ids and user names hold any character; each is one legal segment of its own, and a
    name of the stores' alphabet is its own (what stores written before the escaping hold)."""
    segment = layout.name_segment(name)
    assert check_key(f"kafka/groups/{segment}") == ["kafka", "groups", segment]
    assert layout.name_of_segment(segment) == name
    assert (layout.name_segment(other) == segment) == (other == name)
    if (
        name
        and not name.startswith("-")
        and name not in (".", "..")
        and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    ):
        assert segment == name


def test_a_name_too_long_for_a_key_is_refused_naming_it() -> None:
    layout.name_segment("g" * 255)
    with pytest.raises(ValueError, match=r"name 'ññ.*too long to keep"):
        layout.name_segment("ñ" * 43)  # 86 bytes, 259 once escaped


COUNTER = r"""
import sys
from kop_spark.errors import BadVersionError
from kop_spark.storage.metadata.file import FileMetadataStore
s = FileMetadataStore(sys.argv[1], sync=False)
me = sys.argv[2]
done = 0
while done < 200:
    cur = s.get("counter")
    value = dict(cur.value)
    value["n"] += 1
    value.setdefault("by", {}).setdefault(me, 0)
    value["by"][me] += 1
    try:
        s.put("counter", value, cur.version)
        done += 1
    except BadVersionError:
        pass
"""


def test_concurrent_processes_never_lose_an_update(tmp_path):
    s = FileMetadataStore(str(tmp_path))
    s.create("counter", {"n": 0})
    procs = [
        subprocess.Popen([PYTHON, "-c", COUNTER, str(tmp_path), f"w{i}"], env=python_subprocess_env()) for i in range(4)
    ]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    final = s.get("counter").value
    assert final["n"] == 800
    assert final["by"] == {f"w{i}": 200 for i in range(4)}


def test_a_settled_key_has_a_probe_token_and_every_write_changes_it(tmp_path):
    """A reader keeps what it read while the probe's token stays equal. A key written within the
    last second has none: a write in the same tick of the filesystem's clock as the one before could
    leave the directory's times as they were. A settled key has one, and any write changes it."""
    clock = ManualClock()
    store = FileMetadataStore(str(tmp_path), clock=clock)
    assert store.probe("a/b") is None, "absent"
    version = store.put("a/b", {"n": 1}, 0)
    assert store.probe("a/b") is None, "just written"
    clock.advance(2000)
    token = store.probe("a/b")
    assert token is not None and store.probe("a/b") == token
    store.put("a/b", {"n": 2}, version)
    clock.advance(2000)
    assert store.probe("a/b") not in (None, token)


def test_what_a_probed_cache_keeps_goes_once_no_look_could_take_it(tmp_path):
    """A kept value past ``PROBED_MAX_AGE_S`` is loaded again by any look, so it goes: a server's
    topics deleted by another process, or not looked at since, are not kept as long as it runs."""
    clock = ManualClock()
    store = FileMetadataStore(str(tmp_path), clock=clock)
    for key in ("t/a", "t/b", "t/c"):
        store.put(key, {"k": key}, 0)
    clock.advance(2000)  # settled: each key has a probe token
    now = [0.0]
    cache = ProbedCache(store, monotonic=lambda: now[0])
    loads: list[str] = []

    def look(key: str) -> dict:
        return cache.get(key, lambda: loads.append(key) or store.get(key).value)

    assert [look(k) for k in ("t/a", "t/b", "t/a")] == [{"k": "t/a"}, {"k": "t/b"}, {"k": "t/a"}]
    assert loads == ["t/a", "t/b"] and len(cache) == 2  # the second look at t/a took what was kept
    now[0] = PROBED_MAX_AGE_S
    assert look("t/c") == {"k": "t/c"} and len(cache) == 1


class _SingleKeysUnprobed(FileMetadataStore):
    """Files whose probe of None is taken as an object store's is: no cheap probe of one key,
    rather than a key changed a moment ago."""

    unprobed_when_changed = False


def test_an_unprobed_value_stands_in_only_for_callers_that_may_take_it_that_old(tmp_path):
    """Where the store cannot probe a key (on an object store, any single key), a caller may take
    what was loaded within ``unprobed_within_s``: a produce acts on its topic's metadata a second
    old, where reading it each time was a billed GET. Others read. On files, a probe of None says
    the key changed a moment ago (another process's new settings): nothing stands in there."""
    files = FileMetadataStore(str(tmp_path / "files"), clock=ManualClock())
    files.put("t/a", {"n": 1}, 0)
    assert files.probe("t/a") is None
    on_files = ProbedCache(files)
    assert on_files.get("t/a", lambda: files.get("t/a").value, unprobed_within_s=1.0) == {"n": 1}
    files.put("t/a", {"n": 2}, 1)  # as another process changes it, a moment later
    assert on_files.get("t/a", lambda: files.get("t/a").value, unprobed_within_s=1.0) == {"n": 2}
    store = _SingleKeysUnprobed(str(tmp_path), clock=ManualClock())
    store.put("t/a", {"n": 1}, 0)
    assert store.probe("t/a") is None
    now = [0.0]
    cache = ProbedCache(store, monotonic=lambda: now[0])
    loads: list[float] = []

    def look(within_s: float) -> dict:
        return cache.get("t/a", lambda: loads.append(now[0]) or store.get("t/a").value, unprobed_within_s=within_s)

    assert look(1.0) == {"n": 1}
    now[0] = 0.9
    assert look(1.0) == {"n": 1} and loads == [0.0], "taken within its age"
    assert look(0.0) == {"n": 1} and loads == [0.0, 0.9], "a caller that may not take it reads"
    assert look(1.0) == {"n": 1} and loads == [0.0, 0.9, 0.9], "and what it read is not kept"
    now[0] = 2.0
    assert look(1.0) == {"n": 1} and loads == [0.0, 0.9, 0.9, 2.0], "past its age: read again"
    cache.forget("t/a")
    assert look(1.0) == {"n": 1} and len(loads) == 5, "forgotten: read again"
