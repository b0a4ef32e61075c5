"""Prints the slowest tests of cargo-nextest JUnit reports, slowest first.

    python3 scripts/slowest-tests.py target/nextest/junit-*.xml [--top N]

Each line: seconds, the report's file stem (which server's run), the test.
"""
import argparse
import os
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    rows = []
    for path in args.reports:
        if not os.path.exists(path):
            continue
        run = os.path.splitext(os.path.basename(path))[0].removeprefix("junit-")
        for case in ET.parse(path).getroot().iter("testcase"):
            rows.append((float(case.get("time", 0)), run, case.get("name")))
    rows.sort(reverse=True)
    print(f"slowest {min(args.top, len(rows))} of {len(rows)} tests:")
    for secs, run, name in rows[: args.top]:
        print(f"  {secs:7.1f} s  {run:9}  {name}")


if __name__ == "__main__":
    main()
