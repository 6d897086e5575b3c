import pytest

from predictor.series import SeriesFormatError, parse_series, read_series, write_series


def test_parse_with_comments_extra_columns_and_ratio(tmp_path):
    s = parse_series("# recorded on a test box\nstep,bytes,reuse_ratio,note\n0,100,1.0,a\n\n1,110,0.9,b\n")
    assert s.steps == (0.0, 1.0) and s.bytes == (100.0, 110.0) and s.reuse_ratio == (1.0, 0.9)
    path = tmp_path / "s.csv"
    write_series(path, [(0, 5), (1.5, 6)], comments=["hello"])
    again = read_series(path)
    assert again.steps == (0.0, 1.5) and again.bytes == (5.0, 6.0) and again.reuse_ratio is None
    assert again.head(1.0).steps == (0.0,)


@pytest.mark.parametrize(
    "text, message",
    [
        ("0,100\n1,200\n", "f.csv:1: missing header"),
        ("", "empty file"),
        ("step,bytes\n", "no samples"),
        ("step,bytes\n0,100\n1,lots\n", "f.csv:3: bytes 'lots' is not a number"),
        ("step,bytes\n0,100\nx,1\n", "f.csv:3: step 'x' is not a number"),
        ("step,bytes\n0,100\n2,1\n1,5\n", "f.csv:4: steps must strictly increase, but step 1 follows 2"),
        ("step,bytes\n0,100\n1,100\n1,5\n", "f.csv:4: steps must strictly increase"),
        ("step,bytes\n0,-5\n", "f.csv:2: bytes '-5' is negative"),
        ("step,bytes\n0,inf\n", "not a finite number"),
        ("step,bytes\n0\n", "f.csv:2: expected 2 columns"),
        ("step,bytes,reuse_ratio\n0,1,2\n", "reuse_ratio '2' is not in (0, 1]"),
    ],
)
def test_bad_files_say_what_and_where(text, message):
    with pytest.raises(SeriesFormatError) as err:
        parse_series(text, "f.csv")
    assert message in str(err.value)


def test_binary_file(tmp_path):
    p = tmp_path / "b.csv"
    p.write_bytes(b"\xff\xfe\x00\x01")
    with pytest.raises(SeriesFormatError, match="not a text file"):
        read_series(p)
