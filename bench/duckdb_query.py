"""DuckDB querying one day partition over S3, as Athena reads a partition:
`SELECT count(*)` and a lookup by `icao_hex`, each on a fresh DuckDB
database (no cache carried from one query to the next), timed one by one,
with the requests the latency proxy saw during each.

    python bench/duckdb_query.py --bucket B --prefix index/.../day=DD/ \
        --endpoint 127.0.0.1:PORT --icao-hex 3C6DD0

Runs in .tools/duckdb and loads httpfs from the duckdb-extension-httpfs wheel
(bench/duckdb_copy.py): nothing is downloaded at run time. The proxy's
`/__proxy/stats` (on --endpoint) is read before and after each query.
Prints JSON: {"count": {"wall_s", "requests", "by_kind", "result"},
"lookup": {..., "rows": [...]}}; the lookup's rows are rendered as text
(every column cast to VARCHAR by DuckDB) and sorted, so that a run before
compaction and one after can be compared as they are.
"""
import argparse
import json
import time
import urllib.request

import duckdb

from duckdb_copy import httpfs_path


def stats(endpoint):
    with urllib.request.urlopen(f"http://{endpoint}/__proxy/stats") as r:
        return json.loads(r.read())


def connect(endpoint):
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{httpfs_path()}'")
    con.execute(f"""CREATE SECRET bench (TYPE s3, KEY_ID 'test', SECRET 'test', REGION 'us-east-1',
                    ENDPOINT '{endpoint}', URL_STYLE 'path', USE_SSL false)""")
    return con


def timed(endpoint, sql, params):
    """Runs one query on a new database: (result rows, column names, wall s,
    proxy requests, requests by kind). The connection is opened (and httpfs
    loaded) before the clock starts."""
    con = connect(endpoint)
    before = stats(endpoint)
    t0 = time.perf_counter()
    cur = con.execute(sql, params)
    rows = cur.fetchall()
    wall = time.perf_counter() - t0
    after = stats(endpoint)
    names = [d[0] for d in cur.description]
    con.close()
    kinds = {k: v - before["by_kind"].get(k, 0) for k, v in after["by_kind"].items()
             if v - before["by_kind"].get(k, 0)}
    return rows, names, wall, after["requests"] - before["requests"], kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--endpoint", required=True, help="host:port of the proxy in front of S3 (plain HTTP)")
    ap.add_argument("--icao-hex", required=True, help="the lookup's value (one that exists in the day)")
    args = ap.parse_args()
    src = f"s3://{args.bucket}/{args.prefix}*.parquet"
    out = {"source": src}

    rows, _, wall, req, kinds = timed(args.endpoint, f"SELECT count(*) FROM read_parquet('{src}')", [])
    out["count"] = {"wall_s": wall, "requests": req, "by_kind": kinds, "result": rows[0][0]}

    rows, names, wall, req, kinds = timed(
        args.endpoint, f"SELECT COLUMNS(*)::VARCHAR FROM read_parquet('{src}') WHERE icao_hex = ?",
        [args.icao_hex])
    # Every column as DuckDB's own text (no pytz needed for the timestamps),
    # rows sorted: the same rows print the same whichever file they came from.
    rendered = sorted(json.dumps(dict(zip(names, r)), default=str, sort_keys=True) for r in rows)
    out["lookup"] = {"wall_s": wall, "requests": req, "by_kind": kinds, "icao_hex": args.icao_hex,
                     "result": len(rows), "rows": rendered}
    out["threads"] = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
