"""Hostile index inputs for tests/suite/bounded_inputs.rs: objects that are small or
plain in the listing but would take far more memory than the function has
once decoded, written with pyarrow as a buggy writer or a stray upload would.

    python hostile.py --endpoint URL --bucket B < spec.json  -> {"key", "size"}

spec.json: {"kind": K, "date": "2026-07-20", ...}, K one of
    "bomb"         a per-flight file (and its flight object) whose one row's
                   `registration` is "bytes" (default 700,000,000) bytes of
                   one letter: zstd makes it some KB on disk
    "rows"         a multi-row file "name" (default `export-rows.parquet`) of
                   "rows" (default 20,000,000) identical rows: dictionary
                   and RLE encoding make it some hundred KB; their
                   `s3_key` is "s3_key" (default one that names no flight)
    "columns"      a per-flight file (and its flight object) with the nine
                   index columns and "columns" (default 50,000) in all
    "not_parquet"  `export-big.parquet`: "bytes" (default 96 MiB) random
                   bytes, no Parquet at all
"""
import argparse
import datetime as dt
import gzip
import io
import json
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import archive  # noqa: E402  (the archive writer's schema and layout)


def one_flight(s3, bucket, d, seed):
    """A new flight of date `d`: its object under flights/, and its row."""
    u, key, row = archive.make_flight(d, random.Random(seed), "long", 0)
    s3.put_object(Bucket=bucket, Key=key, Body=gzip.compress(b"{}"))
    return u, row


def write(table, **kw):
    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)
    return buf.getvalue()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    args = p.parse_args()
    spec = json.load(sys.stdin)
    s3 = archive.client(args.endpoint)
    d = dt.date.fromisoformat(spec["date"])
    kind = spec["kind"]
    if kind == "bomb":
        u, row = one_flight(s3, args.bucket, d, spec.get("seed", 7))
        row["registration"] = "A" * spec.get("bytes", 700_000_000)
        table = pa.Table.from_pylist([row], schema=archive.SCHEMA)
        body = write(table, compression="zstd", use_dictionary=False, write_statistics=False)
        key = archive.index_prefix(d) + f"{u}.parquet"
    elif kind == "rows":
        n = spec.get("rows", 20_000_000)
        start = dt.datetime(d.year, d.month, d.day, 12, tzinfo=dt.timezone.utc)
        ts = pa.scalar(start, type=pa.timestamp("us", tz="UTC"))
        cols = {
            "icao_hex": pa.repeat("ABC123", n),
            "registration": pa.repeat("N1", n),
            "type_designator": pa.repeat("B738", n),
            "military": pa.repeat(False, n),
            "operator_designator": pa.repeat("UAL", n),
            "ident": pa.repeat("UAL1", n),
            "first_message": pa.repeat(ts, n),
            "last_message": pa.repeat(ts, n),
            "s3_key": pa.repeat(spec.get("s3_key", "flights/not-a-flight.json.gz"), n),
        }
        table = pa.Table.from_pydict(cols, schema=archive.SCHEMA)
        body = write(table, compression="zstd")
        key = archive.index_prefix(d) + spec.get("name", "export-rows.parquet")
    elif kind == "columns":
        u, row = one_flight(s3, args.bucket, d, spec.get("seed", 8))
        base = pa.Table.from_pylist([row], schema=archive.SCHEMA)
        extra = spec.get("columns", 50_000) - len(archive.SCHEMA)
        names = base.column_names + [f"extra_{i:05d}" for i in range(extra)]
        one = pa.array([1], type=pa.int32())
        table = pa.Table.from_arrays(base.columns + [one] * extra, names=names)
        body = write(table)
        key = archive.index_prefix(d) + f"{u}.parquet"
    elif kind == "not_parquet":
        body = random.Random(9).randbytes(spec.get("bytes", 96 * 1024 * 1024))
        key = archive.index_prefix(d) + "export-big.parquet"
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    s3.put_object(Bucket=args.bucket, Key=key, Body=body)
    json.dump({"key": key, "size": len(body)}, sys.stdout)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
