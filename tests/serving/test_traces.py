"""Traces as published: the Azure LLM inference trace's format, windows, rate scaling, capping to
the compiled graphs (reported, never silent), and bad traces as one line naming file and line."""
from __future__ import annotations

from pathlib import Path

import pytest

from sn40l_sim.commands.check import check_file
from sn40l_sim.errors import InfeasibleError, InputError
from sn40l_sim.serving.traces import read_trace, select_window
from sn40l_sim.serving.workload import build_requests
from sn40l_sim.study.experiment import TraceWorkload

CLOCK = 1e9
REPO = Path(__file__).resolve().parents[2]
SLICE = REPO / "experiments" / "traces" / "azure_llm_2023_conv_10min.csv"
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def azure(tmp_path, rows, name="azure.csv"):
    path = tmp_path / name
    path.write_text(HEADER + "".join(f"2023-11-16 {t},{p},{o}\n" for t, p, o in rows))
    return path


def build(rows, prompt_len=4096, max_new_tokens=128, **spec):
    return build_requests(TraceWorkload(kind="trace", path="t.csv", **spec), prompt_len=prompt_len,
                          max_new_tokens=max_new_tokens, slots=4, seed=0, clock_hz=CLOCK, trace_rows=rows)


def test_azure_timestamps_become_seconds_after_the_first_request(tmp_path):
    # the date is the file's: past midnight without a new date goes backwards, an error (below)
    path = azure(tmp_path, [("23:59:59.9000000", 10, 2), ("23:59:59.9500001", 20, 3), ("00:00:01.0000000", 30, 4)],
                 name="midnight.csv")
    rows = read_trace(azure(tmp_path, [("18:15:46.6805900", 374, 44), ("18:15:50.9951690", 396, 109)]))
    assert [(r.prompt_len, r.output_len, r.line) for r in rows] == [(374, 44, 2), (396, 109, 3)]
    assert rows[1].arrival_s == pytest.approx(4.314579, abs=1e-9) and rows[0].file == str(tmp_path / "azure.csv")
    with pytest.raises(InputError, match="expected a timestamp no earlier than the previous line's") as info:
        read_trace(path)
    assert info.value.line == 4


def test_azure_requests_stamped_alike_arrive_together(tmp_path):
    # a burst logged on one clock tick is two requests at once, not a damaged file
    rows = read_trace(azure(tmp_path, [("18:15:46.5000000", 10, 2), ("18:15:46.5000000", 20, 3),
                                       ("18:15:47.0000000", 30, 4)]))
    assert [(r.arrival_s, r.prompt_len) for r in rows] == [(0.0, 10), (0.0, 20), (0.5, 30)]


def test_the_committed_slice_is_the_first_ten_minutes():
    rows = read_trace(SLICE)
    assert len(rows) == 2867 and rows[0].arrival_s == 0.0 and rows[-1].arrival_s < 600
    assert max(r.prompt_len for r in rows) == 7930 and max(r.output_len for r in rows) == 1000
    assert "CC-BY 4.0" in (SLICE.parent / "README.md").read_text() and "Splitwise" in (SLICE.parent / "README.md").read_text()


def test_window_and_rate_scale(tmp_path):
    rows = read_trace(azure(tmp_path, [(f"18:00:{s:02d}.0000000", 100, 10) for s in range(10)]))
    reqs = build(rows, start_s=2, duration_s=4, rate_scale=2)
    assert [r.arrival_cycle for r in reqs] == [0, 500_000_000, 1_000_000_000, 1_500_000_000]
    assert [r.id for r in reqs] == [0, 1, 2, 3]
    assert len(build(rows)) == 10
    with pytest.raises(InputError, match="no request of the trace arrives between 20 s and the end"):
        build(rows, start_s=20)
    assert select_window(rows, 0, None, 1.0) == rows


def test_a_window_bound_falling_on_an_arrival_is_exact(tmp_path):
    # 0.3 s - 0.1 s is 0.19999999999999998 s in binary: a window of 0.2 s held the request arriving
    # 0.2 s after the first (3 requests, not 2), and start_s: 0.2 left out the one arriving at 0.2 s
    path = tmp_path / "decimal.csv"
    path.write_text("arrival_s,prompt_len,output_len\n0.1,100,10\n0.2,100,10\n0.3,100,10\n")
    rows = read_trace(path)
    assert [r.arrival_cycle for r in build(rows, duration_s=0.2)] == [0, 100_000_000]
    assert [r.arrival_cycle for r in build(rows, start_s=0.2)] == [0]
    assert [r.arrival_cycle for r in build(rows, start_s=0.1, duration_s=0.1)] == [0]


def test_a_window_of_a_simulator_trace_counts_from_its_first_request(tmp_path):
    # as the schema says for both formats: a trace whose clock starts at 1000 s was windowed (and its
    # rate, for a rate search, taken) from 0 s, so duration_s: 5 found no request and the base rate
    # was 3 requests over 1002 s
    path = tmp_path / "late.csv"
    path.write_text("arrival_s,prompt_len,output_len\n1001,100,10\n1000,100,10\n1002,100,10\n")
    rows = read_trace(path)
    assert [r.arrival_s for r in select_window(rows, 1.0)] == [0.0, 1.0]
    assert [r.arrival_cycle for r in build(rows, duration_s=5)] == [0, 1_000_000_000, 2_000_000_000]
    with pytest.raises(InputError, match="between 3 s and the end .the trace has 3, the last 2 s after the first"):
        build(rows, start_s=3)
    assert check_file(path) == "trace (3 requests over 2 s)"


def test_a_byte_order_mark_is_not_part_of_the_header(tmp_path):
    # spreadsheets save "CSV UTF-8" with one; it made the header 'missing column arrival_s' while
    # the message showed the header looking right
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbfarrival_s,prompt_len,output_len\n0,100,10\n")
    assert [(r.arrival_s, r.prompt_len, r.line) for r in read_trace(path)] == [(0.0, 100, 2)]
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"arrival_s": 0, "prompt_len": 100, "output_len": 10}\n')
    assert [(r.prompt_len, r.line) for r in read_trace(path)] == [(100, 1)]


def test_lengths_above_the_graphs_name_the_trace_line_unless_capped(tmp_path):
    path = azure(tmp_path, [("18:00:00.0", 100, 10), ("18:00:01.0", 5000, 10), ("18:00:02.0", 100, 300)])
    rows = read_trace(path)
    with pytest.raises(InfeasibleError, match="prompt_len 5000 exceeds .*cap_lengths: true") as info:
        build(rows)
    assert (info.value.file, info.value.line) == (str(path), 3)
    reqs = build(rows, cap_lengths=True)
    assert [(r.prompt_len, r.output_len) for r in reqs] == [(100, 10), (4096, 10), (100, 128)]
    assert [(r.capped_prompt_tokens, r.capped_output_tokens) for r in reqs] == [(0, 0), (904, 0), (0, 172)]


def test_a_trace_that_is_not_text_is_one_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"arrival_s,prompt_len,output_len\n0,1,1\xff\n")
    with pytest.raises(InputError, match="not a text file .byte 37 is not UTF-8") as info:
        read_trace(path)
    assert info.value.file == str(path)


@pytest.mark.parametrize("text, line, match", [
    (HEADER + "2023-11-16 18:00:01.5,1,1\n2023-11-16 18:00:01.0,1,1\n", 3, "TIMESTAMP: expected a timestamp no earlier"),
    (HEADER + "2023-11-16 18:00:02.0,1,1\n2023-11-16 18:00:01.5,1,1\n", 3, "timestamps must not decrease"),
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:00:01.0,1\n", 1, "missing column 'GeneratedTokens'"),
    ("arrival_s,prompt_len\n0,1\n", 1, "missing column 'output_len'"),
    (HEADER + "yesterday,1,1\n", 2, "TIMESTAMP: expected a date and time"),
    # an offset beside stamps without one was a TypeError traceback; the published trace has none
    (HEADER + "2023-11-16 18:00:01+05:00,1,1\n2023-11-16 18:00:02,1,1\n", 2, "no time-zone offset"),
    (HEADER + "2023-11-16 18:00:01,1,1\n2023-11-16 18:00:02Z,1,1\n", 3, "no time-zone offset"),
    # a date alone was read as midnight: the first row's day, so a trace starting with it began hours early
    (HEADER + "2023-11-16,1,1\n2023-11-16 18:00:02,1,1\n", 2, "TIMESTAMP: expected a date and time"),
    (HEADER + "2023-11-16 18:00:01,1,1\n2023-11-17,1,1\n", 3, "TIMESTAMP: expected a date and time"),
    (HEADER + "2023-11-16 18:00:01.0,0,1\n", 2, "ContextTokens: expected a positive integer from 1"),
    ("arrival_s,prompt_len,output_len\n-0.5,1,1\n", 2, "arrival_s: expected a time from 0 s"),
    (HEADER + "2023-11-16 18:00:01.0,1,1\n2024-11-16 18:00:01.0,1,1\n", 3, "TIMESTAMP: expected a time from 0 s"),
    ("arrival_s,prompt_len,output_len\n0,1e30,1\n", 2, "prompt_len: expected a positive integer from 1 to"),
])
def test_bad_traces_are_one_line_naming_file_and_line(tmp_path, text, line, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=match) as info:
        read_trace(path)
    assert info.value.file == str(path) and info.value.line == line and "\n" not in str(info.value)


@pytest.mark.parametrize("text, got", [
    ("arrival_s,prompt_len,output_len\n0,32,768,100\n", 4),   # was read as 0, 32, 768 without a word
    ("arrival_s,prompt_len,output_len\n0,32,768,\n", 4),
    ("arrival_s,prompt_len,output_len\n0,32\n", 2),
    (HEADER + "2023-11-16 18:00:01.0,1,1,7\n", 4),
])
def test_a_csv_row_has_one_value_per_column_of_the_header(tmp_path, text, got):
    path = tmp_path / "ragged.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=f"expected 3 values .*, got {got}$") as info:
        read_trace(path)
    assert (info.value.file, info.value.line) == (str(path), 2)


@pytest.mark.parametrize("text, shown", [
    # integer text was read through a float: the message named 99999999999999991611392
    (HEADER + "2023-11-16 18:00:01.0,99999999999999999999999,1\n", "got 99999999999999999999999"),
    ("arrival_s,prompt_len,output_len\n0,1,2147483648\n", "got 2147483648"),
    ("arrival_s,prompt_len,output_len\n0,1e30,1\n", "got 1e+30"),
    ('{"arrival_s": 0, "prompt_len": 12345678901234567890123, "output_len": 1}\n', "got 12345678901234567890123"),
    # past a float's range the range check's isfinite raised OverflowError, a traceback
    pytest.param("arrival_s,prompt_len,output_len\n0,1," + "9" * 400 + "\n", "... (400 characters)",
                 id="simulator-400-digits"),
    pytest.param(HEADER + "2023-11-16 18:00:01.0," + "9" * 400 + ",1\n", "... (400 characters)", id="azure-400-digits"),
])
def test_an_out_of_range_length_is_shown_as_written(tmp_path, text, shown):
    path = tmp_path / ("long.jsonl" if text.startswith("{") else "long.csv")
    path.write_text(text)
    with pytest.raises(InputError, match="expected a positive integer from 1 to 2147483647") as info:
        read_trace(path)
    assert str(info.value).endswith(shown)


def test_csv_values_are_text_parsed_as_numbers(tmp_path):
    path = tmp_path / "text.csv"
    path.write_text('arrival_s,prompt_len,output_len\n"0.5", 1e3 ,"7"\n\n2,3,4\n')
    assert [(r.arrival_s, r.prompt_len, r.output_len, r.line) for r in read_trace(path)] == \
        [(0.5, 1000, 7, 2), (2.0, 3, 4, 4)]


@pytest.mark.parametrize("text, line, column, written", [
    # Python's int() and float() read 1_000 as 1000 and Arabic-Indic digits as theirs: the trace
    # ran with numbers no data file writes that way
    ("arrival_s,prompt_len,output_len\n0.0,1_000,64\n", 2, "prompt_len", "'1_000'"),
    ("arrival_s,prompt_len,output_len\n0.0,100,64\n0.5,2000,6_4\n", 3, "output_len", "'6_4'"),
    ("arrival_s,prompt_len,output_len\n1_0.5,100,10\n", 2, "arrival_s", "'1_0.5'"),
    (HEADER + "2023-11-16 18:00:01.0,3_74,44\n", 2, "ContextTokens", "'3_74'"),
    (HEADER + "2023-11-16 18:00:01.0,374,44\n2023-11-16 18:00:02.0,\u0663\u0669\u0666,1\n", 3, "ContextTokens",
     "'\u0663\u0669\u0666'"),
    (HEADER + "2023-11-16 18:00:01.0,374,\uff14\uff14\n", 2, "GeneratedTokens", "'\uff14\uff14'"),
])
def test_a_csv_number_is_plain_ascii_digits_without_separators(tmp_path, text, line, column, written):
    path = tmp_path / "grouped.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_trace(path)
    what = "a number" if column == "arrival_s" else "an integer"
    assert str(info.value) == (f"{path}:{line}: {column}: expected {what} written in plain digits (0-9, no _ or "
                               f"other separators), got {written}")


@pytest.mark.parametrize("value, shown", [
    ('"0"', 'the string "0" (write it without quotes)'), ("true", "true"), ("[1]", "[1]"),
    # a value is shown whole up to 40 characters, quotes included, else cut to 37 and "..."
    (f'"{"a" * 38}"', f'the string "{"a" * 38}" (write it without quotes)'),
    (f'"{"a" * 39}"', f'the string "{"a" * 36}... (write it without quotes)'),
])
@pytest.mark.parametrize("column", ["arrival_s", "prompt_len"])
def test_a_jsonl_trace_takes_json_numbers(tmp_path, value, shown, column):
    # "0" and true were read as the numbers they look like (true as arrival 1 s)
    path = tmp_path / "strings.jsonl"
    values = {"arrival_s": "0", "prompt_len": "100", "output_len": "10", column: value}
    path.write_text('{"arrival_s": 1, "prompt_len": 5, "output_len": 5}\n'
                    + "{" + ", ".join(f'"{k}": {v}' for k, v in values.items()) + "}\n")
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}:2: {column}: expected a JSON number, got {shown}"


def test_a_folder_is_not_a_trace(tmp_path):
    with pytest.raises(InputError) as info:
        read_trace(tmp_path)
    assert str(info.value) == f"{tmp_path}: is a folder; expected a CSV or JSONL trace"


def test_a_jsonl_record_naming_a_key_twice_is_refused(tmp_path):
    # json keeps the last value of a repeated key: a mistyped record would have passed unseen
    path = tmp_path / "twice.jsonl"
    path.write_text('{"arrival_s": 0, "prompt_len": 100, "output_len": 10, "prompt_len": 5}\n')
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert str(info.value) == f"{path}:1: key 'prompt_len' appears twice in one record; expected each once"


@pytest.mark.parametrize("name", ["trace.JSONL", "trace.Jsonl"])
def test_a_jsonl_trace_is_told_apart_whatever_the_case_of_its_suffix(tmp_path, capsys, name):
    # read as CSV, it was 'missing column arrival_s' beside a header holding arrival_s
    path = tmp_path / name
    path.write_text('{"arrival_s": 0, "prompt_len": 100, "output_len": 10}\n')
    assert [(r.arrival_s, r.prompt_len) for r in read_trace(path)] == [(0.0, 100)]
    upper = tmp_path / "trace.CSV"
    upper.write_text("arrival_s,prompt_len,output_len\n0,100,10\n")
    assert check_file(upper).startswith("trace")   # a trace, not a YAML file



@pytest.mark.parametrize("inside", ["\x0c", "\x0b", "\x1c", "\x1e", "\x85", "\u2028", "\u2029"])
def test_an_error_names_the_line_an_editor_numbers(tmp_path, inside):
    # str.splitlines ends a line at these too: a row holding one counted as two, and every error
    # below it named the line after its own
    csv_path, jsonl_path = tmp_path / "t.csv", tmp_path / "t.jsonl"
    csv_path.write_text(f"arrival_s,prompt_len,output_len\n0,10,10{inside}\n1,10,10\n2,abc,10\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_trace(csv_path)
    # the row holding the character is refused at its line, or read, and the next error is at its own
    assert info.value.line == (4 if "abc" in str(info.value) else 2)
    record = '{"arrival_s": 0, "prompt_len": %d, "output_len": 5}'
    jsonl_path.write_text(f"{record % 10}\n{record % 10}{inside}\n{record % -1}\n", encoding="utf-8")
    with pytest.raises(InputError, match="invalid JSON") as info:   # JSON's whitespace is space, tab, CR, LF
        read_trace(jsonl_path)
    assert info.value.line == 2
