import io

from orchrm_dagster.ingest.reader import iter_jsonl


def test_lines_are_numbered_blank_lines_skipped_and_oversize_lines_cut():
    data = b'{"a":1}\n\n' + b"x" * 100 + b"\n" + b'{"b":2}' + b"\n" + b'{"c":3}'
    lines = list(iter_jsonl(io.BytesIO(data), max_record_bytes=50))
    assert [line.line_number for line in lines] == [1, 3, 4, 5]
    assert lines[1].oversize_bytes == 101 and len(lines[1].data) == 50
    assert lines[2].data == b'{"b":2}\n' and lines[2].oversize_bytes is None
    assert lines[3].data == b'{"c":3}'  # last line without a newline
