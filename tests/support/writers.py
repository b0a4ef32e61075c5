"""Index files as other writers than the archive's write them (pyarrow with
extra, renamed or duplicated columns, fastparquet through pandas, polars),
and independent readers of a compacted file (pyarrow, DuckDB, Spark).

    python writers.py put   --endpoint URL --bucket B < spec.json  -> {"key", "flight", "uuid", "row"}
    python writers.py read  --endpoint URL --bucket B < {"key"}    -> what pyarrow and DuckDB read
    python writers.py spark --endpoint URL --bucket B < {"key"}    -> what Spark reads

put writes one flight object and its per-flight index file:
    {"date": "2026-07-20", "i": 0, "seed": 1, "writer": "pyarrow" | "fastparquet" | "polars",
     "extra": [[name, kind, value], ...],   columns after the nine (kinds below)
     "rename": {"icao_hex": "Icao_Hex"},     a known column under another spelling
     "s3_key": "null" | "empty",            the row's s3_key left null or empty
     "nulls": ["registration"]}              known columns written as all-None
kinds: int32, int64, float64, string, bool, struct ({"lat": float}), list (of int64),
null (an all-None column of the writer's own choosing); a value "=ident" is
that known column's value.
The row printed is what was written, canonical (timestamps as epoch microseconds).
"""
import argparse
import datetime as dt
import decimal
import gzip
import io
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
import archive  # noqa: E402  (the archive's own fixtures: flights, schema, client)
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

KINDS = {
    "int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(), "string": pa.string(),
    "bool": pa.bool_(), "struct": pa.struct([("lat", pa.float64())]), "list": pa.list_(pa.int64()),
    "null": pa.string(),
}


def columns(spec, row):
    """[(name, arrow type, value)] in file order."""
    out = []
    for f in archive.SCHEMA:
        v = None if f.name in spec.get("nulls", []) else row[f.name]
        out.append((spec.get("rename", {}).get(f.name, f.name), f.type, v))
    for name, kind, value in spec.get("extra", []):
        if isinstance(value, str) and value.startswith("="):
            value = row[value[1:]]  # "=ident": the value of that known column
        out.append((name, KINDS[kind], value))
    return out


def pyarrow_bytes(cols):
    fields = [pa.field(n, t, nullable=not (n == "military" and t == pa.bool_())) for n, t, _ in cols]
    arrays = [pa.array([v], t) for _, t, v in cols]
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def fastparquet_bytes(cols):
    import fastparquet
    import pandas as pd
    data = {}
    for n, t, v in cols:
        if pa.types.is_timestamp(t) and v is not None:
            data[n] = pd.Series([pd.Timestamp(v)], dtype="datetime64[us, UTC]")
        else:
            data[n] = pd.Series([v], dtype=object if v is None or isinstance(v, (str, dict, list)) else None)
    df = pd.DataFrame(data)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "f.parquet")
        fastparquet.write(path, df)  # default settings: object columns inferred
        with open(path, "rb") as f:
            return f.read()


def polars_bytes(cols):
    import polars as pl
    types = {"int32": pl.Int32, "int64": pl.Int64, "float64": pl.Float64, "string": pl.String, "bool": pl.Boolean}
    schema, data = {}, {}
    for n, t, v in cols:
        if pa.types.is_timestamp(t):
            schema[n] = pl.Datetime("us", "UTC")
        elif t == pa.bool_():
            schema[n] = pl.Boolean
        elif t == pa.string():
            schema[n] = pl.String
        else:
            schema[n] = types[str(t).replace("double", "float64")]
        data[n] = [v]
    buf = io.BytesIO()
    pl.DataFrame(data, schema=schema).write_parquet(buf)
    return buf.getvalue()


def put(args):
    spec = json.load(sys.stdin)
    s3 = archive.client(args.endpoint)
    rnd = random.Random(spec.get("seed", 1) * 1000 + spec.get("i", 0))
    d = dt.date.fromisoformat(spec["date"])
    u, key, row = archive.make_flight(d, rnd, "long", spec.get("i", 0))
    # Flights in the order asked: the uuid's time is the flight's `i`.
    first = dt.datetime(d.year, d.month, d.day, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=spec.get("i", 0))
    row["first_message"], row["last_message"] = first, first + dt.timedelta(hours=1, microseconds=123457)
    u = archive.uuid7(archive.micros(first) // 1000, rnd)
    key = archive.flights_prefix(d) + f"{row['icao_hex']}_{row['ident'] or 'NOIDENT'}_{u}.json.gz"
    row["s3_key"] = {"null": None, "empty": ""}.get(spec.get("s3_key"), key)
    s3.put_object(Bucket=args.bucket, Key=key, Body=gzip.compress(json.dumps(archive.canonical(row)).encode()))
    cols = columns(spec, row)
    body = {"pyarrow": pyarrow_bytes, "fastparquet": fastparquet_bytes, "polars": polars_bytes}[spec["writer"]](cols)
    ik = archive.index_prefix(d) + f"{u}.parquet"
    s3.put_object(Bucket=args.bucket, Key=ik, Body=body)
    written = {}
    for n, _, v in cols:
        written.setdefault(n, v)
    json.dump({"key": ik, "flight": key, "uuid": u, "row": archive.canonical(written)}, sys.stdout)


def plain(v):
    """A value as JSON: timestamps in epoch microseconds, decimals as text."""
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return archive.micros(v)
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    return v


def read(args):
    spec = json.load(sys.stdin)
    s3 = archive.client(args.endpoint)
    body = s3.get_object(Bucket=args.bucket, Key=spec["key"])["Body"].read()
    t = pq.read_table(io.BytesIO(body))
    out = {"pyarrow": {"schema": str(t.schema.remove_metadata()),
                       "rows": [plain(r) for r in t.to_pylist()]}}
    import duckdb
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.parquet")
        with open(path, "wb") as f:
            f.write(body)
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        rel = con.execute(f"SELECT * FROM read_parquet('{path}') ORDER BY s3_key")
        names = [c[0] for c in rel.description]
        out["duckdb"] = {"columns": names,
                         "rows": [dict(zip(names, map(plain, r))) for r in rel.fetchall()]}
    json.dump(out, sys.stdout)


def spark(args):
    spec = json.load(sys.stdin)
    s3 = archive.client(args.endpoint)
    body = s3.get_object(Bucket=args.bucket, Key=spec["key"])["Body"].read()
    from pyspark.sql import SparkSession
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "c.parquet")
        with open(path, "wb") as f:
            f.write(body)
        s = (SparkSession.builder.master("local[1]").appName("archive-compaction-test")
             .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
        s.sparkContext.setLogLevel("ERROR")
        df = s.read.parquet(path)
        rows = [r.asDict(recursive=True) for r in df.orderBy("s3_key").collect()]
        out = {"columns": df.columns, "rows": [plain(r) for r in rows],
               "icao_hex": [r[0] for r in df.orderBy("s3_key").select("ICAO_HEX").collect()]}
        s.stop()
    json.dump(out, sys.stdout)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["put", "read", "spark"])
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    args = p.parse_args()
    {"put": put, "read": read, "spark": spark}[args.cmd](args)


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
