import io
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from orchrm_dagster.ingest import reader
from orchrm_dagster.ingest.reader import iter_jsonl


def test_lines_are_numbered_blank_lines_skipped_and_oversize_lines_cut():
    data = b'{"a":1}\n\n' + b"x" * 100 + b"\n" + b'{"b":2}' + b"\n" + b'{"c":3}'
    lines = list(iter_jsonl(io.BytesIO(data), max_record_bytes=50))
    assert [line.line_number for line in lines] == [1, 3, 4, 5]
    assert lines[1].oversize_bytes == 101 and len(lines[1].data) == 50
    assert lines[2].data == b'{"b":2}' and lines[2].oversize_bytes is None  # without its newline
    assert lines[3].data == b'{"c":3}'  # last line without a newline


def _expected(data: bytes, max_record_bytes: int, budget: int | None) -> list[tuple]:
    """The definition, written plainly: lines split at newlines, numbered from 1, those starting within budget."""
    expected, start = [], 0
    pieces = data.split(b"\n")
    if data.endswith(b"\n"):
        pieces.pop()
    for number, piece in enumerate(pieces, 1):
        if budget is not None and start >= budget:
            break
        size = len(piece) + (1 if start + len(piece) < len(data) else 0)
        start += size
        if len(piece) > max_record_bytes:
            expected.append((number, piece[:max_record_bytes], size))
            continue
        if number == 1 and piece.startswith(b"\xef\xbb\xbf"):
            piece = piece[3:]
        if piece.strip():
            expected.append((number, piece, None))
    return expected


line_texts = st.one_of(st.binary(max_size=30), st.sampled_from([b"", b" ", b"\r", b"\t \r", b"\xef\xbb\xbf{}", b'{"a":1}']))


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(line_texts.map(lambda b: b.replace(b"\n", b"")), max_size=12), st.booleans(), st.integers(1, 40),
       st.integers(1, 64), st.none() | st.integers(0, 400))
def test_lines_match_their_definition_whatever_the_block_size(texts, final_newline, max_record_bytes, block, budget):
    data = b"\n".join(texts) + (b"\n" if final_newline and texts else b"")
    with patch.object(reader, "_BLOCK", block), patch.object(reader, "_BUFFER", max(1, block // 2)):
        lines = list(iter_jsonl(io.BytesIO(data), max_record_bytes, byte_budget=budget))
    assert [(line.line_number, line.data, line.oversize_bytes) for line in lines] == _expected(
        data, max_record_bytes, budget)
