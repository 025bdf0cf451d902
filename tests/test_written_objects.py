"""What a process keeps of the objects it uploaded: bounded, oldest out first, never a byte it
does not hold."""

from kop_spark.storage.written_objects import WrittenObjects


def test_the_oldest_objects_go_first_and_one_too_large_is_not_kept() -> None:
    kept = WrittenObjects(capacity=160, largest=1 << 20)
    for name in "abcd":
        kept.wrote(name, name.encode() * 10)
    assert kept.read("d", 0, 10) == b"d" * 10
    kept.wrote("big", b"x" * 11)  # over a sixteenth of the capacity
    assert kept.read("big", 0, 1) is None
    for name in "efghijklmnopq":  # 17 objects of 10 bytes in all: the first go
        kept.wrote(name, name.encode() * 10)
    assert [n for n in "abcdefghijklmnopq" if kept.read(n, 0, 10) is not None] == list("bcdefghijklmnopq")


def test_an_object_larger_than_the_largest_kept_is_not_kept() -> None:
    kept = WrittenObjects(capacity=1 << 20, largest=4)
    kept.wrote("small", b"1234")
    kept.wrote("large", b"12345")
    assert kept.read("small", 0, 4) == b"1234" and kept.read("large", 0, 5) is None


def test_a_read_past_what_is_kept_is_left_to_the_store() -> None:
    kept = WrittenObjects(capacity=1 << 20, largest=1 << 20)
    kept.wrote("a", b"0123456789")
    assert kept.read("a", 2, 3) == b"234"
    assert kept.read("a", 8, 3) is None and kept.read("a", -1, 2) is None
    kept.wrote("a", b"new")  # a path written again (another object since a delete) takes its place
    assert kept.read("a", 0, 3) == b"new"
    kept.deleted(["a"])
    assert kept.read("a", 0, 3) is None
