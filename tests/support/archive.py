"""Archive fixtures for the tests, the demo and the benchmark, written the way
the real archive writer writes them (pyarrow, default writer settings, the
schema in specs/index-schema.md), and an independent reader to check outputs.

    python archive.py gen  --endpoint URL --bucket B < spec.json   -> expected rows (JSON)
    python archive.py dump --endpoint URL --bucket B [--prefix P]  -> every object, decoded (JSON)

spec.json: {"seed": 1, "days": [{"date": "2026-07-20", "flights": 100,
            "unindexed": 2, "foreign": true}], "key_format": "mixed"}

A day with "legacy": {"name": "legacy-migration.parquet", "also_per_flight": 2}
is written as the archive's legacy migration backfilled old days: the day's
index rows together in one multi-row file of that name, in no particular
order, and no per-flight files; "also_per_flight" flights get their own
per-flight file too, a newer version (ident "NEWER"), which is the row
expected after compaction.

Rows are given canonically: timestamps as integer microseconds since the
epoch (UTC), everything else as JSON values.
"""
import argparse
import concurrent.futures as cf
import datetime as dt
import gzip
import io
import json
import os
import random
import sys
import uuid

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.config import Config

SCHEMA = pa.schema([
    pa.field("icao_hex", pa.string()),
    pa.field("registration", pa.string()),
    pa.field("type_designator", pa.string()),
    pa.field("military", pa.bool_(), nullable=False),
    pa.field("operator_designator", pa.string()),
    pa.field("ident", pa.string()),
    pa.field("first_message", pa.timestamp("us", tz="UTC")),
    pa.field("last_message", pa.timestamp("us", tz="UTC")),
    pa.field("s3_key", pa.string()),
])
TYPES = ["B738", "A320", "CRJ9", "E75L", "B77W", "C172", None]
OPS = ["UAL", "SKW", "ASA", "DAL", None]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def client(endpoint):
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        # ARCHIVE_AWS_* for a server that enforces IAM (tests/support/least_privilege.py).
        aws_access_key_id=os.environ.get("ARCHIVE_AWS_ACCESS_KEY_ID", "test"),
        aws_secret_access_key=os.environ.get("ARCHIVE_AWS_SECRET_ACCESS_KEY", "test"),
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      retries={"max_attempts": 5, "mode": "standard"}),
    )


def uuid7(ms, rnd):
    b = bytearray(rnd.getrandbits(128).to_bytes(16, "big"))
    b[0:6] = ms.to_bytes(6, "big")
    b[6] = (b[6] & 0x0F) | 0x70
    b[8] = (b[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(b)))


def micros(t):
    return None if t is None else (t - EPOCH) // dt.timedelta(microseconds=1)


def index_prefix(d):
    return f"index/year={d.year:04d}/month={d.month:02d}/day={d.day:02d}/"


def flights_prefix(d):
    return f"flights/{d.year:04d}/{d.month:02d}/{d.day:02d}/"


def make_flight(d, rnd, key_format, i):
    start = dt.datetime(d.year, d.month, d.day, tzinfo=dt.timezone.utc)
    first = start + dt.timedelta(microseconds=rnd.randrange(0, 86_000 * 1_000_000))
    last = first + dt.timedelta(seconds=rnd.randrange(60, 14_000), microseconds=rnd.randrange(0, 999_999))
    u = uuid7(micros(first) // 1000, rnd)
    icao = f"{rnd.randrange(0, 0xFFFFFF):06X}"
    op = rnd.choice(OPS)
    ident = f"{op or 'N'}{rnd.randrange(1, 9999)}" if rnd.random() > 0.05 else None
    fmt = key_format if key_format != "mixed" else ("long" if i % 2 == 0 else "short")
    name = f"{icao}_{ident or 'NOIDENT'}_{u}.json.gz" if fmt == "long" else f"{u}.json.gz"
    key = flights_prefix(d) + name
    row = {
        "icao_hex": icao,
        "registration": f"N{rnd.randrange(100, 99999)}" if rnd.random() > 0.1 else None,
        "type_designator": rnd.choice(TYPES),
        "military": rnd.random() < 0.1,
        "operator_designator": op,
        "ident": ident,
        "first_message": first,
        "last_message": last,
        "s3_key": key,
    }
    return u, key, row


def parquet_bytes(rows):
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    buf = io.BytesIO()
    pq.write_table(table, buf)  # default writer settings, like the archive writer
    return buf.getvalue()


def canonical(row):
    return {k: (micros(v) if isinstance(v, dt.datetime) else v) for k, v in row.items()}


def gen(args):
    spec = json.load(sys.stdin)
    s3 = client(args.endpoint)
    if spec.get("create_bucket", True):
        try:
            s3.create_bucket(Bucket=args.bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
    rnd = random.Random(spec.get("seed", 1))
    key_format = spec.get("key_format", "mixed")
    puts, out = [], {"rows": {}, "missing": {}, "flights": {}, "index_keys": {}, "foreign": []}
    for day in spec["days"]:
        d = dt.date.fromisoformat(day["date"])
        unindexed = set(rnd.sample(range(day["flights"]), day.get("unindexed", 0)))
        rows, missing, flights, index_keys = [], [], [], []
        legacy = day.get("legacy")
        legacy_rows = []
        for i in range(day["flights"]):
            u, key, row = make_flight(d, rnd, key_format, i)
            flights.append(key)
            puts.append((key, gzip.compress(json.dumps(canonical(row)).encode()), "application/gzip"))
            if i in unindexed:
                missing.append(u)
                continue
            ik = index_prefix(d) + f"{u}.parquet"
            if legacy is not None:
                legacy_rows.append(dict(row))
                if len(legacy_rows) <= legacy.get("also_per_flight", 0):
                    row = dict(row, ident="NEWER")
                    index_keys.append(ik)
                    puts.append((ik, parquet_bytes([row]), None))
                rows.append(canonical(row))
                continue
            index_keys.append(ik)
            puts.append((ik, parquet_bytes([row]), None))
            rows.append(canonical(row))
        if legacy is not None:
            rnd.shuffle(legacy_rows)
            lk = index_prefix(d) + legacy.get("name", "legacy-migration.parquet")
            index_keys.append(lk)
            puts.append((lk, parquet_bytes(legacy_rows), None))
        if day.get("foreign"):
            for name, body in [("_SUCCESS", b""), ("notes.json", b"{}"), (".hidden.parquet", b"x"),
                               ("_tmp.parquet", parquet_bytes([]))]:
                k = index_prefix(d) + name
                puts.append((k, body, None))
                out["foreign"].append(k)
            marker = index_prefix(d)
            puts.append((marker, b"", None))
            out["foreign"].append(marker)
        out["rows"][d.isoformat()] = rows
        out["missing"][d.isoformat()] = sorted(missing)
        out["flights"][d.isoformat()] = flights
        out["index_keys"][d.isoformat()] = index_keys

    def put(item):
        key, body, ctype = item
        kw = {"ContentType": ctype} if ctype else {}
        s3.put_object(Bucket=args.bucket, Key=key, Body=body, **kw)

    with cf.ThreadPoolExecutor(max_workers=int(os.environ.get("GEN_THREADS", "16"))) as ex:
        list(ex.map(put, puts))
    json.dump(out, sys.stdout)


def list_all(s3, bucket, prefix):
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [(o["Key"], o["Size"], o["ETag"]) for o in page.get("Contents", [])]
    return keys


def dump(args):
    s3 = client(args.endpoint)
    out = {}
    for key, size, etag in list_all(s3, args.bucket, args.prefix):
        entry = {"size": size, "etag": etag}
        try:
            body = s3.get_object(Bucket=args.bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            continue  # deleted between the listing and the read (e.g. a released lease)
        if key.endswith(".parquet") and size > 0:
            try:
                f = pq.ParquetFile(io.BytesIO(body))
                t = f.read()
                entry["arrow_schema"] = str(t.schema.remove_metadata())
                entry["parquet_schema"] = [
                    f"{c.name}:{c.physical_type}:{c.logical_type}:{'REQUIRED' if c.max_definition_level == 0 else 'OPTIONAL'}"
                    for c in f.schema
                ]
                entry["compression"] = sorted({f.metadata.row_group(g).column(c).compression
                                               for g in range(f.metadata.num_row_groups)
                                               for c in range(f.metadata.num_columns)})
                entry["rows"] = [canonical(r) for r in t.to_pylist()]
            except Exception as e:  # not parquet: report, do not fail
                entry["error"] = str(e)
        elif key.endswith(".json"):
            try:
                entry["json"] = json.loads(body)
            except Exception as e:
                entry["error"] = str(e)
        out[key] = entry
    json.dump(out, sys.stdout)


def rewrite(args):
    """Rewrites one index file in place (same key, new ETag) the way the writer
    does when it stitches a split flight: same flight, new values."""
    s3 = client(args.endpoint)
    body = s3.get_object(Bucket=args.bucket, Key=args.key)["Body"].read()
    rows = pq.read_table(io.BytesIO(body)).to_pylist()
    for r in rows:
        r["ident"] = args.ident
        r["last_message"] = r["last_message"] + dt.timedelta(hours=1)
    s3.put_object(Bucket=args.bucket, Key=args.key, Body=parquet_bytes(rows))
    json.dump([canonical(r) for r in rows], sys.stdout)


def _variant_table(v, row):
    """The table a writer variant would write for `row` (a dict of Python values)."""
    fields = list(SCHEMA)
    data = dict(row)

    def retype(name, typ, nullable=True):
        i = [f.name for f in fields].index(name)
        fields[i] = pa.field(name, typ, nullable=nullable)

    if v == "ts_ms":
        for c in ("first_message", "last_message"):
            data[c] = data[c].replace(microsecond=data[c].microsecond // 1000 * 1000)
            retype(c, pa.timestamp("ms", tz="UTC"))
    elif v == "ts_s":
        for c in ("first_message", "last_message"):
            data[c] = data[c].replace(microsecond=0)
            retype(c, pa.timestamp("s", tz="UTC"))
    elif v in ("ts_ns_exact", "ts_ns_lossy"):
        for c in ("first_message", "last_message"):
            retype(c, pa.timestamp("ns", tz="UTC"))
    elif v == "ts_naive":
        for c in ("first_message", "last_message"):
            data[c] = data[c].replace(tzinfo=None)
            retype(c, pa.timestamp("us"))
    elif v == "large_string":
        for f in list(fields):
            if f.type == pa.string():
                retype(f.name, pa.large_string())
    elif v == "string_view":
        for f in list(fields):
            if f.type == pa.string():
                retype(f.name, pa.string_view())
    elif v == "dictionary":
        for c in ("operator_designator", "type_designator", "ident"):
            retype(c, pa.dictionary(pa.int32(), pa.string()))
    elif v == "reordered":
        fields = fields[::-1]
    elif v in ("military_nullable", "military_null"):
        retype("military", pa.bool_(), nullable=True)
        if v == "military_null":
            data["military"] = None
    elif v == "military_as_string":
        retype("military", pa.string())
        data["military"] = "true" if data["military"] else "false"
    elif v == "missing_registration":
        fields = [f for f in fields if f.name != "registration"]
        data.pop("registration")
    elif v == "missing_military":
        fields = [f for f in fields if f.name != "military"]
        data.pop("military")
    elif v == "extra_column":
        fields.append(pa.field("squawk", pa.int32()))
        data["squawk"] = 7700
    schema = pa.schema(fields)
    if v == "kv_metadata":
        schema = schema.with_metadata({"writer": "archive-writer 0.9", "note": "drift"})
    cols = {f.name: [data[f.name]] for f in fields}
    if v == "ts_ns_exact":
        cols = {k: (pa.array([micros(x[0]) * 1000], pa.timestamp("ns", tz="UTC")) if k in ("first_message", "last_message") else x) for k, x in cols.items()}
    if v == "ts_ns_lossy":
        cols = {k: (pa.array([micros(x[0]) * 1000 + 123], pa.timestamp("ns", tz="UTC")) if k in ("first_message", "last_message") else x) for k, x in cols.items()}
    table = pa.table({k: (c if isinstance(c, pa.Array) else pa.array(c, schema.field(k).type)) for k, c in cols.items()}, schema=schema)
    return table, data


def _write_variant(v, table):
    buf = io.BytesIO()
    kw = {}
    if v == "int96":
        kw = {"use_deprecated_int96_timestamps": True}
    elif v == "parquet_v1":
        kw = {"version": "1.0", "compression": "gzip"}
    elif v == "zstd_v2_pages_no_stats":
        kw = {"compression": "zstd", "data_page_version": "2.0", "write_statistics": False}
    elif v in ("brotli", "lz4"):
        kw = {"compression": v}
    elif v == "plain_no_dictionary":
        kw = {"use_dictionary": False, "compression": "none"}
    pq.write_table(table, buf, **kw)
    body = buf.getvalue()
    if v == "bad_magic":
        body = b"NOPE" + body[4:]
    elif v == "truncated":
        body = body[: len(body) // 2]
    return body


UNMERGEABLE = {"ts_ns_lossy": "first_message", "military_null": "military", "missing_military": "military",
               "military_as_string": "military", "bad_magic": None, "truncated": None}


def variants(args):
    """Writes one flight + one index file per writer variant into one day.
    Prints {variant: {"key", "mergeable", "column", "row"}} with the row as
    the compacted file must hold it (target types, canonical JSON)."""
    spec = json.load(sys.stdin)
    s3 = client(args.endpoint)
    rnd = random.Random(spec.get("seed", 1))
    d = dt.date.fromisoformat(spec["date"])
    out = {}
    for i, v in enumerate(spec["variants"]):
        u, key, row = make_flight(d, rnd, "long", i)
        s3.put_object(Bucket=args.bucket, Key=key, Body=gzip.compress(json.dumps(canonical(row)).encode()))
        ik = index_prefix(d) + f"{u}.parquet"
        if v == "zero_rows":
            table, data = pa.Table.from_pylist([], schema=SCHEMA), None
        else:
            table, data = _variant_table(v, row)
        s3.put_object(Bucket=args.bucket, Key=ik, Body=_write_variant(v, table))
        expected = None
        if data is not None and v not in UNMERGEABLE:
            expected = {f.name: data.get(f.name) for f in SCHEMA}
            for c in ("first_message", "last_message"):
                t = expected[c]
                if t is not None and t.tzinfo is None:
                    expected[c] = t.replace(tzinfo=dt.timezone.utc)
            expected = canonical(expected)
            if v == "extra_column":
                expected["squawk"] = 7700
        out[v] = {"key": ik, "flight": key, "mergeable": v not in UNMERGEABLE, "column": UNMERGEABLE.get(v), "row": expected}
    json.dump(out, sys.stdout)


def multi_row(args):
    """Writes one multi-row index file, as a legacy migration, an export or
    the Python job's compaction would: the rows of the index files in
    "from" (in that order; "shuffle": true for no particular order), with
    the string fields in "set" overridden; "move": true deletes the "from"
    files afterwards (the Python job's compaction), "delete": [keys] deletes
    those. Prints the rows written."""
    spec = json.load(sys.stdin)
    s3 = client(args.endpoint)
    rows = []
    for k in spec["from"]:
        body = s3.get_object(Bucket=args.bucket, Key=k)["Body"].read()
        rows.extend(pq.read_table(io.BytesIO(body)).to_pylist())
    for r in rows:
        r.update(spec.get("set", {}))
    if spec.get("shuffle"):
        random.Random(spec.get("seed", 1)).shuffle(rows)
    s3.put_object(Bucket=args.bucket, Key=spec["key"], Body=parquet_bytes(rows))
    for k in (spec["from"] if spec.get("move") else []) + spec.get("delete", []):
        s3.delete_object(Bucket=args.bucket, Key=k)
    json.dump({"key": spec["key"], "rows": [canonical(r) for r in rows]}, sys.stdout)


def put_row(args):
    """Writes one index file for an existing or new flight of a date, like
    the writer does for a late flight (new uuid) or a stitched one (same key)."""
    spec = json.load(sys.stdin)
    s3 = client(args.endpoint)
    rnd = random.Random(spec.get("seed", 1))
    d = dt.date.fromisoformat(spec["date"])
    u, key, row = make_flight(d, rnd, "long", 0)
    if spec.get("flight_key"):
        key = spec["flight_key"]
        u = key.rsplit("/", 1)[-1].removesuffix(".json.gz").rsplit("_", 1)[-1]
        row["s3_key"] = key
    else:
        s3.put_object(Bucket=args.bucket, Key=key, Body=gzip.compress(b"{}"))
    for k, val in spec.get("set", {}).items():
        row[k] = val
    rows = [row]
    # "copies_of": index keys whose rows this file carries too (a writer that
    # re-emits other flights' rows: an irregular, multi-row per-flight file).
    for other in spec.get("copies_of", []):
        body = s3.get_object(Bucket=args.bucket, Key=other)["Body"].read()
        rows.extend(pq.read_table(io.BytesIO(body)).to_pylist())
    ik = index_prefix(d) + f"{u}.parquet"
    s3.put_object(Bucket=args.bucket, Key=ik, Body=parquet_bytes(rows))
    json.dump({"key": ik, "row": canonical(row)}, sys.stdout)


def index_kind(key, size):
    """What an object under index/ is, by the rules of the job's
    `keys::IndexKey` (docs/ARCHITECTURE.md, "Index inputs and foreign
    objects"): "per_flight" ({uuid}.parquet), "compacted" (compacted-*.parquet),
    "multi_row" (any other .parquet name), or "foreign" (another suffix, a
    hidden or `_` name, a zero-byte object, a directory marker, a nested
    prefix)."""
    parts = key.split("/")
    if len(parts) != 5 or not parts[4]:
        return "foreign"
    name = parts[4]
    if not name.endswith(".parquet") or name.startswith(("_", ".")) or size == 0:
        return "foreign"
    if name.startswith("compacted-"):
        return "compacted"
    stem = name[: -len(".parquet")]
    try:
        # The hyphenated form only, as the job parses it.
        return "per_flight" if str(uuid.UUID(stem)) == stem.lower() else "multi_row"
    except ValueError:
        return "multi_row"


def summary(args):
    """Prints a per-day table of the index partitions: per-flight files,
    compacted files, other multi-row files (backfills, exports), rows (from
    the multi-row files' Parquet footers; a per-flight file counts as its one
    row, unread) and foreign objects, for every date from the first to
    the last seen (a date with neither flights nor index files says so),
    then the watermark. Files are told apart by what their names are (a
    UUID, `compacted-`, another name), as the job tells them apart."""
    s3 = client(args.endpoint)
    days = {}
    empty = {"per_flight": 0, "compacted": 0, "multi_row": 0, "rows": 0, "foreign": 0}
    for key, size, _ in list_all(s3, args.bucket, "index/"):
        parts = key.split("/")
        if len(parts) < 5:
            continue
        day = "-".join(p.split("=")[1] for p in parts[1:4])
        d = days.setdefault(day, dict(empty))
        kind = index_kind(key, size)
        d[kind] += 1
        if kind in ("compacted", "multi_row"):
            body = s3.get_object(Bucket=args.bucket, Key=key)["Body"].read()
            try:
                d["rows"] += pq.ParquetFile(io.BytesIO(body)).metadata.num_rows
            except Exception:
                pass  # unreadable: counted as a file, its rows unknown
        elif kind == "per_flight":
            d["rows"] += 1
    flights = {}
    for key, _, _ in list_all(s3, args.bucket, "flights/"):
        parts = key.split("/")
        if len(parts) == 5 and parts[4]:
            day = "-".join(parts[1:4])
            flights[day] = flights.get(day, 0) + 1
    # Every date from the first to the last one seen, so that a day with no
    # flights (and so no partition) shows as such instead of being left out.
    seen = sorted(set(days) | set(flights))
    dates = []
    if seen:
        d, last = dt.date.fromisoformat(seen[0]), dt.date.fromisoformat(seen[-1])
        while d <= last:
            dates.append(d.isoformat())
            d += dt.timedelta(days=1)
    print(f"{'date':<12}{'flights':>9}{'per-flight':>12}{'compacted':>11}{'multi-row':>11}{'rows':>8}{'foreign':>9}")
    for day in dates:
        d = days.get(day, empty)
        note = "   (no flights, no index partition)" if day not in days and day not in flights else ""
        print(f"{day:<12}{flights.get(day, 0):>9}{d['per_flight']:>12}{d['compacted']:>11}{d['multi_row']:>11}{d['rows']:>8}{d['foreign']:>9}{note}")
    try:
        wm = s3.get_object(Bucket=args.bucket, Key="_compaction_state/watermark.json")["Body"].read()
        print("watermark:", json.loads(wm).get("last_compacted_date"))
    except s3.exceptions.NoSuchKey:
        print("watermark: (none)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["gen", "dump", "summary", "rewrite", "variants", "put-row", "multi-row"])
    p.add_argument("--key")
    p.add_argument("--ident", default="REWRITTEN")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    p.add_argument("--prefix", default="")
    args = p.parse_args()
    {"gen": gen, "dump": dump, "summary": summary, "rewrite": rewrite, "variants": variants,
     "put-row": put_row, "multi-row": multi_row}[args.cmd](args)


if __name__ == "__main__":
    main()
    # pyarrow's and boto3's background threads can abort the interpreter at
    # shutdown ("terminate called without an active exception"); the output
    # is complete here, so leave without running the shutdown hooks.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
