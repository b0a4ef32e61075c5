#!/usr/bin/env bash
# make deploy, before anything is built: AWS credentials that STS accepts, and
# a terminal for `sam deploy --guided`'s questions. Fails at once, saying what
# is missing, instead of after minutes of cross-compiling (or waiting for
# answers nobody can give).
set -euo pipefail
PY=${SAM_PYTHON:-python3}
if ! out=$("$PY" - 2>&1 <<'PYEOF'
import os, sys
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
session = boto3.Session()
region = session.region_name or "us-east-1"
try:
    ident = session.client(
        "sts", region_name=region,
        config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1}),
    ).get_caller_identity()
except (BotoCoreError, ClientError) as e:
    print(e)
    sys.exit(1)
print(f"{ident['Arn']} (account {ident['Account']})")
PYEOF
); then
  echo "make deploy: AWS credentials did not pass a check with STS (GetCallerIdentity): $out" >&2
  echo "  Set AWS_PROFILE (aws configure, or aws sso login) or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, then retry." >&2
  exit 1
fi
if ! [ -t 0 ]; then
  echo "make deploy: sam deploy --guided asks questions (stack name, region, confirmations):" >&2
  echo "  run it from a terminal. Non-interactive: sam build, then sam deploy with a samconfig.toml." >&2
  exit 1
fi
echo "make deploy: deploying as $out" >&2
