"""DuckDB compacting one day over S3: read_parquet over the partition's
files (httpfs), COPY to one Parquet file in the bucket.

    python bench/duckdb_copy.py --bucket B --prefix index/.../day=DD/ --endpoint 127.0.0.1:PORT

Runs in .tools/duckdb (duckdb + the duckdb-extension-httpfs wheel of the same
version): httpfs is LOADed from the wheel's file, so nothing is downloaded at
run time. DuckDB uses all cores (its default threads). Prints JSON.
"""
import argparse
import glob
import json
import os

import duckdb
import duckdb_extension_httpfs


def httpfs_path():
    base = os.path.dirname(duckdb_extension_httpfs.__file__)
    found = glob.glob(os.path.join(base, "extensions", f"v{duckdb.__version__}", "httpfs.duckdb_extension"))
    if not found:
        raise SystemExit(f"no httpfs extension for duckdb {duckdb.__version__} under {base}")
    return found[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--endpoint", required=True, help="host:port of the S3 endpoint (plain HTTP)")
    args = ap.parse_args()
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    con.execute(f"LOAD '{httpfs_path()}'")
    con.execute(f"""CREATE SECRET bench (TYPE s3, KEY_ID 'test', SECRET 'test', REGION 'us-east-1',
                    ENDPOINT '{args.endpoint}', URL_STYLE 'path', USE_SSL false)""")
    src = f"s3://{args.bucket}/{args.prefix}*.parquet"
    out = f"s3://{args.bucket}/bench-out/duckdb.parquet"
    rows = con.execute(f"COPY (SELECT * FROM read_parquet('{src}')) TO '{out}' "
                       f"(FORMAT parquet, COMPRESSION zstd)").fetchone()[0]
    print(json.dumps({"rows": rows, "threads": con.execute("SELECT current_setting('threads')").fetchone()[0]}))


if __name__ == "__main__":
    main()
