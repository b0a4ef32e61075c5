"""The sequential baseline: what the Python compaction job does for one day.

    python bench/baseline.py --bucket B --prefix index/year=.../day=DD/

Lists the partition, GETs every per-flight file one after the other, reads
each with pyarrow, `concat_tables`, writes one Parquet file (zstd) and PUTs
it once (to bench-out/, so the day stays intact for the other contenders).
Endpoint and credentials from AWS_ENDPOINT_URL etc. Prints JSON.
"""
import argparse
import io
import json
import os

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
from botocore.config import Config


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--prefix", required=True)
    args = ap.parse_args()
    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                      config=Config(s3={"addressing_style": "path"}))
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=args.bucket, Prefix=args.prefix):
        keys += [o["Key"] for o in page.get("Contents", [])
                 if o["Key"].endswith(".parquet") and not o["Key"].rsplit("/", 1)[1].startswith("compacted-")]
    tables = []
    for k in keys:
        body = s3.get_object(Bucket=args.bucket, Key=k)["Body"].read()
        tables.append(pq.read_table(io.BytesIO(body)))
    table = pa.concat_tables(tables)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    s3.put_object(Bucket=args.bucket, Key=f"bench-out/baseline-{len(keys)}.parquet", Body=buf.getvalue())
    print(json.dumps({"files": len(keys), "rows": table.num_rows, "output_bytes": buf.tell()}))


if __name__ == "__main__":
    main()
