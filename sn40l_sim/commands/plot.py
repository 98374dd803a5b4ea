"""Plot two columns of a results.csv (from run or sweep), one line per value of --hue.

Axis labels carry units (sizes in GiB, bandwidths in GB/s); the title is the experiment's name.
Rows that share an x within a series are refused rather than averaged: the message names the
columns that tell them apart, to add to --hue or to select with --where. A row without a number
for --y (an empty cell, nan, inf) is left out with a warning naming its line; a ragged row or a
column named twice is refused.

examples:
  python -m sn40l_sim plot out/sweep/results.csv --x batch --y decode_tokens_per_s --hue kv_policy prefill_len
  python -m sn40l_sim plot out/sweep/results.csv --x prefill_len --y ttft_s --hue kv_policy --where batch=8 --logx
  python -m sn40l_sim plot out/deepseek_tp16/results.csv --x name --y decode_tokens_per_s_reported --kind bar --out tps.svg
  python -m sn40l_sim plot out/kv_policies/results.csv --x kv_bytes_per_context_token --y decode_tokens_per_s \
      --hue prefill_len --where model=deepseek-r1 --kind scatter --label policy_entry --logx
"""
from __future__ import annotations

import argparse

from sn40l_sim.commands.argtypes import input_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``plot``'s arguments."""
    parser.add_argument("csv", type=input_path, metavar="RESULTS.csv", help="a results.csv written by run or sweep")
    parser.add_argument("--x", required=True, metavar="COLUMN", help="column on the x axis")
    parser.add_argument("--y", required=True, metavar="COLUMN", help="numeric column on the y axis")
    # extend, not store: a second --hue replaced the first without a word
    parser.add_argument("--hue", nargs="+", action="extend", default=[], metavar="COLUMN",
                        help="column(s) whose values pick the series (one line each); repeatable")
    parser.add_argument("--where", action="append", default=[], metavar="COLUMN=VALUE",
                        help="keep only rows where COLUMN equals VALUE; repeatable")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="output .png, .svg or .pdf (default: <csv folder>/<y>_vs_<x>.png)")
    parser.add_argument("--logx", action="store_true", help="logarithmic x axis")
    parser.add_argument("--logy", action="store_true", help="logarithmic y axis")
    parser.add_argument("--kind", choices=("line", "bar", "scatter"), default="line",
                        help="lines (default), grouped bars, or unjoined points (a Pareto plot)")
    parser.add_argument("--label", default=None, metavar="COLUMN",
                        help="write this column's value beside each point (--kind scatter)")


def run(args: argparse.Namespace) -> int:
    """Draw the plot and print its path; 0 on success."""
    from sn40l_sim.errors import InputError
    from sn40l_sim.report.outputs import check_file, output_path
    from sn40l_sim.report.plot_csv import plot_csv

    args.out = output_path(args.out, "--out")
    where = {}
    for item in args.where:
        column, sep, value = item.partition("=")
        if not sep or not column:
            raise InputError(f"expected COLUMN=VALUE, got {item!r}", field="--where")
        if column in where:   # the later value replaced the earlier one: the plot showed half of what was asked
            raise InputError(f"column {column!r} is given twice ({where[column]!r} and {value!r}); a row is kept when "
                             "it equals every --where: expected each column once", field="--where")
        where[column] = value
    twice = next((column for i, column in enumerate(args.hue) if column in args.hue[:i]), None)
    if twice is not None:
        raise InputError(f"column {twice!r} is given twice; expected each column once", field="--hue")
    if args.out is not None:
        check_file(args.out, "--out")
    path = plot_csv(args.csv, x=args.x, y=args.y, hue=args.hue, out=args.out, kind=args.kind, logx=args.logx,
                    logy=args.logy, where=where, label=args.label)
    print(f"wrote {path}")
    return 0
