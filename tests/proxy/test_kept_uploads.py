"""The pieces of Gemini uploads kept until their file is whole: bounded by the body limit
in all, the least recently used upload dropped first."""

from __future__ import annotations

from turngate.proxy.kept_uploads import MAX_UPLOADS, KeptUploads


def test_an_uploads_pieces_are_taken_whole_in_order():
    kept = KeptUploads(limit=100)
    assert kept.add("a", b'{"key": ') == []
    assert kept.add("a", b'"one"}') == []
    assert kept.received("a") == 14
    assert kept.take("a") == b'{"key": "one"}'
    assert kept.received("a") == 0


def test_the_least_recently_used_upload_is_dropped_to_keep_within_the_limit():
    kept = KeptUploads(limit=10)
    kept.add("a", b"aaaa")
    kept.add("b", b"bbbb")
    kept.add("a", b"aa")  # a is now the more recent
    assert kept.add("c", b"cccc") == ["b"]
    assert (kept.received("a"), kept.received("b"), kept.received("c")) == (6, 0, 4)


def test_taken_and_dropped_uploads_free_their_room():
    kept = KeptUploads(limit=10)
    kept.add("a", b"a" * 6)
    kept.take("a")
    kept.add("b", b"b" * 4)
    assert kept.drop("b")
    assert not kept.drop("b")
    assert kept.add("c", b"c" * 10) == []
    assert kept.received("c") == 10


def test_an_upload_is_dropped_with_its_parts():
    kept = KeptUploads(limit=100)
    kept.add("upload_1", b"")
    kept.add("upload_1/part_1", b"one")
    kept.add("upload_10/part_1", b"other")
    kept.drop_all("upload_1")
    assert not kept.holds("upload_1")
    assert not kept.holds("upload_1/part_1")
    assert kept.holds("upload_10/part_1")


def test_empty_uploads_are_bounded_in_number():
    kept = KeptUploads(limit=100)
    for number in range(MAX_UPLOADS):
        assert kept.add(f"upload_{number}", b"") == []
    assert kept.add("one more", b"") == ["upload_0"]


def test_a_piece_sent_again_cuts_what_followed_its_offset():
    kept = KeptUploads(limit=10)
    kept.add("a", b"0123456789")
    kept.cut("a", 4)
    assert kept.received("a") == 4
    assert kept.add("b", b"xxxxxx") == []  # the room the cut freed
    kept.cut("a", 8)  # past its end: nothing to cut
    assert kept.take("a") == b"0123"
