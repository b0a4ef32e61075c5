"""Least privilege, tested: run by tests/least_privilege.rs.

    python least_privilege.py --binary PATH

The role policy is read from template.yaml (CompactionRole's inline policy,
its intrinsics resolved for a bucket, a namespace, a log group, a queue and a
secret made here), attached to an IAM user on a moto server that enforces IAM
(INITIAL_NO_AUTH_ACTION_COUNT: the first three calls create an admin user;
everything after is authorised), and the job (the `archive-compaction run`
binary, with that user's access keys and MQTT_PASSWORD_SECRET_ARN set) must:

1. run to Success with no reporting error (S3, CloudWatch, Secrets Manager);
2. be denied reading, overwriting and deleting a flights/ object, writing a
   per-flight index file (only compacted-*.parquet may be PUT under index/)
   and deleting _compaction_state/watermark.json;
3. with any one statement removed, fail or report an error (PublishMetrics
   excepted: moto cannot serve the SDK's CloudWatch calls, see below). WriteLogs and
   FailureDestination are used by Lambda itself with the function's role (its
   logs and the failure record), never by the job: for those the test makes
   Lambda's calls (logs:CreateLogStream + PutLogEvents, sqs:SendMessage) with
   the user's keys, allowed with the statement, denied without.
4. BucketKmsKeyArn (SSE-KMS), unset and set. Unset (steps 1-3): no statement
   names a KMS action. Set to a key made here: the policy is the unset one
   plus exactly one statement, BucketKmsKey, allowing exactly kms:Decrypt and
   kms:GenerateDataKey on exactly that key ARN (the ARN also fits the
   parameter's AllowedPattern); the job runs to Success under it on a bucket
   whose default encryption is SSE-KMS with that key (its objects, the
   compacted file included, say aws:kms and the key). S3 makes the KMS calls
   on the role's behalf (GenerateDataKey for a PUT, Decrypt for a GET), and
   moto's S3 makes none: the test makes them itself with the user's keys,
   allowed with BucketKmsKey, denied without it (step 3's loop runs over
   the policy with the key set, so BucketKmsKey is one of the statements
   removed).

moto's limits, worked around here only: it checks Secrets Manager, KMS and
CloudWatch Logs actions against the resource "*", so ReadMqttPassword,
BucketKmsKey and WriteLogs are attached with Resource "*" (their Action
unchanged; step 4 checks BucketKmsKey's Resource in the policy itself); and the
job runs with METRICS_ENABLED=false (moto answers the SDK's CloudWatch
protocol with 404). One exception for S3, and only there: moto authorises DeleteObjects (the job's
batch delete of compacted inputs) as s3:DeleteObject on the *bucket* ARN,
where AWS checks s3:DeleteObject on each key (and an ETag-conditional delete
also needs s3:GetObject on it, per AWS's conditional-delete guide; the
IndexObjects statement grants both). So the user gets one extra statement,
s3:DeleteObject on arn:aws:s3:::BUCKET (the bucket, no key: it grants no
object), which AWS's policy has no need of.

5. `prune-cache` under `specs/prune-cache.policy.json` (the host's
   credential, docs/migrating.md "The host's index cache"), as its own user,
   on a bucket without SSE-KMS (moto's S3 makes no KMS call; with SSE-KMS the
   credential adds kms:Decrypt on the key, as the policy's doc says):
   prunes a local cache mirroring the bucket (the compacted day's copies go,
   the others stay); with either statement removed it exits 1 and deletes
   nothing; the user can read no index object.

6. `status` under `specs/status.policy.json` (an operator's read-only
   credential, docs/deploying.md "Versioned buckets"), as its own user, on a
   versioned bucket with a recorded mismatch that only a read of the
   date's index files shows (a per-flight file holding another flight's row): exit 0, no error, the mismatch's missing flight
   named and the bucket configuration read without a denial; with
   ReadBucketConfiguration removed only the versioning is unknown
   (AccessDenied, naming the policy); with any other statement removed it
   exits 1 on a denial. moto answers GetBucketVersioning with the root
   element GetBucketVersioningResponse where AWS documents
   VersioningConfiguration, which the Rust SDK refuses to parse: on moto
   the versioning itself stays unknown (not a denial); what status says of
   a versioned bucket is tested on ministack (tests/suite/status.rs).

Exits non-zero with the reason on the first check that fails.
"""
import argparse
import copy
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import boto3
import yaml
from botocore.exceptions import ClientError

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.environ.get("TOOLS_DIR") or os.path.join(ROOT, ".tools")
REGION, ACCOUNT = "us-east-1", "123456789012"
NOW = "2026-07-22T04:50:00Z"
T0 = time.time()

sys.path.insert(0, HERE)
from deployed import Server, archive, check, fail, say  # noqa: E402


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short forms (!Ref X -> {"Ref": X}, !Sub, !GetAtt a.b, ...)."""


def _tag(loader, suffix, node):
    name = "Ref" if suffix == "Ref" else f"Fn::{suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CfnLoader.add_multi_constructor("!", _tag)


def resolve(v, refs, atts, conditions):
    """Resolves the intrinsics the role policy uses: Ref, Sub, GetAtt, If, AWS::NoValue."""
    if isinstance(v, list):
        out = [resolve(x, refs, atts, conditions) for x in v]
        return [x for x in out if x is not NOVALUE]
    if not isinstance(v, dict):
        return v
    if set(v) == {"Ref"}:
        return NOVALUE if v["Ref"] == "AWS::NoValue" else refs[v["Ref"]]
    if set(v) == {"Fn::Sub"}:
        s = v["Fn::Sub"]
        for k, val in refs.items():
            s = s.replace("${" + k + "}", str(val))
        check("${" not in s, f"unresolved Sub {s}")
        return s
    if set(v) == {"Fn::GetAtt"}:
        return atts[".".join(v["Fn::GetAtt"])]
    if set(v) == {"Fn::If"}:
        cond, yes, no = v["Fn::If"]
        return resolve(yes if conditions[cond] else no, refs, atts, conditions)
    out = {k: resolve(x, refs, atts, conditions) for k, x in v.items()}
    return {k: x for k, x in out.items() if x is not NOVALUE}


NOVALUE = object()


def role_policy(refs, atts, conditions):
    with open(os.path.join(ROOT, "template.yaml")) as f:
        template = yaml.load(f, Loader=CfnLoader)
    policies = template["Resources"]["CompactionRole"]["Properties"]["Policies"]
    check(len(policies) == 1, f"CompactionRole has {len(policies)} inline policies")
    return resolve(policies[0]["PolicyDocument"], refs, atts, conditions)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    # Three unauthenticated calls: the admin user, its policy and its key.
    moto = Server("moto-iam", {"MOTO_IAM_SETUP_CALLS": "3", "MOTO_ACCOUNT_ID": ACCOUNT})
    broker = Server("mosquitto")
    endpoint = f"http://127.0.0.1:{moto.port}"
    say(f"moto enforcing IAM on {endpoint}; mosquitto on :{broker.port}")

    def session(key=None):
        k = key or {"AccessKeyId": "test", "SecretAccessKey": "test"}
        return boto3.session.Session(aws_access_key_id=k["AccessKeyId"],
                                     aws_secret_access_key=k["SecretAccessKey"], region_name=REGION)
    iam0 = session().client("iam", endpoint_url=endpoint)
    iam0.create_user(UserName="admin")
    iam0.put_user_policy(UserName="admin", PolicyName="admin", PolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
    admin_key = iam0.create_access_key(UserName="admin")["AccessKey"]
    admin = session(admin_key)
    iam = admin.client("iam", endpoint_url=endpoint)
    # Authorisation is on from here: an anonymous-ish call is refused.
    try:
        session().client("s3", endpoint_url=endpoint).list_buckets()
        fail("moto does not enforce IAM (a call with unknown keys was allowed)")
    except ClientError as e:
        say(f"moto refuses unknown keys: {e.response['Error']['Code']}")

    logs = admin.client("logs", endpoint_url=endpoint)
    sqs = admin.client("sqs", endpoint_url=endpoint)
    sm = admin.client("secretsmanager", endpoint_url=endpoint)
    group = "/aws/lambda/lp-archive-compaction"
    logs.create_log_group(logGroupName=group)
    group_arn = [g for g in logs.describe_log_groups(logGroupNamePrefix=group)["logGroups"]][0]["arn"]
    queue = sqs.create_queue(QueueName="lp-failures")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    secret_arn = sm.create_secret(Name="lp/mqtt-password", SecretString="anything")["ARN"]
    namespace = "LeastPrivilege/Test"

    iam.create_user(UserName="compaction")
    key = iam.create_access_key(UserName="compaction")["AccessKey"]
    user = session(key)
    env_admin = {**os.environ, "ARCHIVE_AWS_ACCESS_KEY_ID": admin_key["AccessKeyId"],
                 "ARCHIVE_AWS_SECRET_ACCESS_KEY": admin_key["SecretAccessKey"]}
    n = [0]

    kms = admin.client("kms", endpoint_url=endpoint)
    key_arn = kms.create_key(Description="lp bucket key")["KeyMetadata"]["Arn"]

    def policy_for(bucket, kms_key=""):
        """CompactionRole's policy for `bucket`, with BucketKmsKeyArn = `kms_key`."""
        refs = {"AWS::Partition": "aws", "AWS::Region": REGION, "AWS::AccountId": ACCOUNT,
                "BucketName": bucket, "MetricsNamespace": namespace, "MqttPasswordSecretArn": secret_arn,
                "BucketKmsKeyArn": kms_key}
        atts = {"LogGroup.Arn": group_arn, "FailureQueue.Arn": queue_arn}
        return role_policy(refs, atts, {"HasMqttPasswordSecret": True, "HasBucketKmsKey": kms_key != ""})

    def for_moto(st):
        """moto checks Secrets Manager, KMS and CloudWatch Logs actions
        against the resource "*" (it derives a resource for S3, SQS and IAM
        only), so a statement naming one secret, key or log group never
        matches there: for moto those three get Resource "*", Action
        unchanged."""
        if st["Sid"] in ("ReadMqttPassword", "WriteLogs", "BucketKmsKey"):
            return {**st, "Resource": "*"}
        return st

    def attach(bucket, statements):
        doc = {"Version": "2012-10-17", "Statement": [for_moto(s) for s in statements] + [{
            "Sid": "MotoDeleteObjects", "Effect": "Allow", "Action": "s3:DeleteObject",
            "Resource": f"arn:aws:s3:::{bucket}"}]}
        iam.put_user_policy(UserName="compaction", PolicyName="archive-compaction", PolicyDocument=json.dumps(doc))

    def fresh_bucket(kms_key=None):
        """A bucket with a generated archive; with `kms_key`, SSE-KMS default
        encryption with that key is set before anything is written."""
        n[0] += 1
        bucket = f"lp-{n[0]}-{os.getpid()}"
        if kms_key:
            a3 = admin.client("s3", endpoint_url=endpoint)
            a3.create_bucket(Bucket=bucket)
            a3.put_bucket_encryption(Bucket=bucket, ServerSideEncryptionConfiguration={"Rules": [{
                "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": kms_key}}]})
        old = os.environ.copy()
        os.environ.update(ARCHIVE_AWS_ACCESS_KEY_ID=admin_key["AccessKeyId"],
                          ARCHIVE_AWS_SECRET_ACCESS_KEY=admin_key["SecretAccessKey"])
        try:
            gen = archive("gen", endpoint, bucket, {"seed": 3, "days": [
                {"date": "2026-07-18", "flights": 6}, {"date": "2026-07-19", "flights": 5}]})
        finally:
            os.environ.clear()
            os.environ.update(old)
        return bucket, gen

    def run_job(bucket):
        env = {"PATH": os.environ.get("PATH", ""), "S3_BUCKET": bucket, "S3_FORCE_PATH_STYLE": "true",
               "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION,
               "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
               "AWS_EC2_METADATA_DISABLED": "true", "METRICS_ENABLED": "false", "METRICS_NAMESPACE": namespace,
               "MQTT_HOST": "127.0.0.1", "MQTT_PORT": str(broker.port), "MQTT_USERNAME": "u",
               "MQTT_PASSWORD_SECRET_ARN": secret_arn, "LOG_LEVEL": "warn"}
        p = subprocess.run([args.binary, "run", "--now", NOW], env=env, capture_output=True, text=True,
                           timeout=120)
        try:
            report = json.loads(p.stdout)
        except ValueError:
            fail(f"no report (exit {p.returncode}): {p.stdout} {p.stderr[-2000:]}")
        return p.returncode, report, p.stderr

    def lambda_calls():
        """What Lambda does with the role: the function's logs and the failure record."""
        lg = user.client("logs", endpoint_url=endpoint)
        q = user.client("sqs", endpoint_url=endpoint)
        out = {}
        try:
            stream = f"s-{time.time_ns()}"
            lg.create_log_stream(logGroupName=group, logStreamName=stream)
            lg.put_log_events(logGroupName=group, logStreamName=stream,
                              logEvents=[{"timestamp": int(time.time() * 1000), "message": "x"}])
            out["WriteLogs"] = True
        except ClientError as e:
            out["WriteLogs"] = e.response["Error"]["Code"]
        try:
            q.send_message(QueueUrl=queue, MessageBody="{}")
            out["FailureDestination"] = True
        except ClientError as e:
            out["FailureDestination"] = e.response["Error"]["Code"]
        return out

    def kms_calls():
        """The KMS calls S3 makes with the role for an SSE-KMS bucket: a data
        key for a PUT, its decryption for a GET."""
        k = user.client("kms", endpoint_url=endpoint)
        blob = kms.generate_data_key(KeyId=key_arn, KeySpec="AES_256")["CiphertextBlob"]
        out = {}
        for what, call in [("GenerateDataKey", lambda: k.generate_data_key(KeyId=key_arn, KeySpec="AES_256")),
                           ("Decrypt", lambda: k.decrypt(CiphertextBlob=blob, KeyId=key_arn))]:
            try:
                call()
                out[what] = True
            except ClientError as e:
                out[what] = e.response["Error"]["Code"]
        return out

    # 1. The whole policy: Success, nothing unreported.
    bucket, gen = fresh_bucket()
    statements = policy_for(bucket)["Statement"]
    sids = [s["Sid"] for s in statements]
    say(f"role policy from template.yaml: {sids}")
    check("ReadMqttPassword" in sids, "no ReadMqttPassword statement with MqttPasswordSecretArn set")
    check("kms:" not in json.dumps(statements).lower(), "a KMS action without BucketKmsKeyArn")
    check(not any(s.get("Resource") in ("*", f"arn:aws:s3:::{bucket}/*") and s["Action"] != "cloudwatch:PutMetricData"
                  for s in statements), "a statement grants every object or every resource")
    attach(bucket, statements)
    time.sleep(0.5)
    code, report, stderr = run_job(bucket)
    check(code == 0 and report["last_run_status"] == "Success",
          f"full policy: exit {code}, {report.get('last_run_status')}: {report.get('error')} {stderr[-1500:]}")
    # MQTT itself is anonymous here (no password file): the secret was read, then published.
    check(report["report_errors"] == [], f"full policy: report_errors {report['report_errors']}")
    check(report["files_compacted"] == 11 and report["files_delete_failed"] == 0,
          f"full policy: {report['files_compacted']} compacted, {report['files_delete_failed']} not deleted")
    calls = lambda_calls()
    check(calls == {"WriteLogs": True, "FailureDestination": True}, f"Lambda's calls with the full policy: {calls}")
    say(f"1. full policy: Success, {report['files_compacted']} files compacted over "
        f"{report['days_compacted']} days, no reporting error; Lambda's log and failure-queue calls allowed")

    # 2. flights/ cannot be read, overwritten or deleted.
    s3 = user.client("s3", endpoint_url=endpoint)
    flight = gen["flights"]["2026-07-18"][0]
    listed = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="flights/")["Contents"]]
    check(flight in listed, f"{flight} not listed")
    denied = {}
    for what, call in [("read", lambda: s3.get_object(Bucket=bucket, Key=flight)),
                       ("head", lambda: s3.head_object(Bucket=bucket, Key=flight)),
                       ("overwrite", lambda: s3.put_object(Bucket=bucket, Key=flight, Body=b"x")),
                       ("delete", lambda: s3.delete_object(Bucket=bucket, Key=flight))]:
        try:
            call()
            fail(f"{what} of {flight} was allowed")
        except ClientError as e:
            denied[what] = e.response["Error"]["Code"]
            check(denied[what] in ("AccessDenied", "403"), f"{what}: {denied[what]}")
    a3 = admin.client("s3", endpoint_url=endpoint)
    check(a3.head_object(Bucket=bucket, Key=flight)["ContentLength"] > 0, "the flight object changed")
    say(f"2. {flight}: {denied} (listing it is the only access)")
    # Only what the code calls: no per-flight PUT under index/, no watermark DELETE.
    per_flight = "index/year=2026/month=07/day=18/019f7d73-f820-702f-b905-8c81d0944996.parquet"
    watermark = "_compaction_state/watermark.json"
    before = a3.get_object(Bucket=bucket, Key=watermark)["Body"].read()
    refused = {}
    for what, call in [("per-flight PUT", lambda: s3.put_object(Bucket=bucket, Key=per_flight, Body=b"PAR1")),
                       ("watermark DELETE", lambda: s3.delete_object(Bucket=bucket, Key=watermark))]:
        try:
            call()
            fail(f"{what} was allowed")
        except ClientError as e:
            refused[what] = e.response["Error"]["Code"]
            check(refused[what] in ("AccessDenied", "403"), f"{what}: {refused[what]}")
    check(a3.get_object(Bucket=bucket, Key=watermark)["Body"].read() == before, "the watermark changed")
    check("Contents" not in a3.list_objects_v2(Bucket=bucket, Prefix=per_flight), f"{per_flight} was written")
    say(f"2. {refused} (the job's Success above needed neither)")

    calls = kms_calls()
    check(calls["GenerateDataKey"] is not True and calls["Decrypt"] is not True,
          f"KMS calls allowed without BucketKmsKeyArn: {calls}")

    # 4. BucketKmsKeyArn set: one statement more, exactly the two actions on that key.
    with open(os.path.join(ROOT, "template.yaml")) as f:
        pattern = yaml.load(f, Loader=CfnLoader)["Parameters"]["BucketKmsKeyArn"]["AllowedPattern"]
    check(re.fullmatch(pattern, key_arn) and re.fullmatch(pattern, ""),
          f"BucketKmsKeyArn's AllowedPattern {pattern} refuses {key_arn} or the empty default")
    check(not re.fullmatch(pattern, key_arn.replace(":key/", ":alias/")), f"{pattern} accepts an alias")
    bucket, gen = fresh_bucket(key_arn)
    unset = policy_for(bucket)["Statement"]
    with_key = policy_for(bucket, key_arn)["Statement"]
    extra = [st for st in with_key if st not in unset]
    check([st for st in with_key if st in unset] == unset, "BucketKmsKeyArn changed another statement")
    check(extra == [{"Sid": "BucketKmsKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                     "Resource": key_arn}], f"with BucketKmsKeyArn, the statements added: {extra}")
    attach(bucket, with_key)
    time.sleep(0.5)
    code, report, stderr = run_job(bucket)
    check(code == 0 and report["last_run_status"] == "Success" and report["report_errors"] == [],
          f"SSE-KMS bucket: exit {code}, {report.get('last_run_status')}: {report.get('error')} "
          f"{report.get('report_errors')} {stderr[-1500:]}")
    check(report["files_compacted"] == 11, f"SSE-KMS bucket: {report['files_compacted']} compacted")
    a3 = admin.client("s3", endpoint_url=endpoint)
    objs = [o["Key"] for o in a3.list_objects_v2(Bucket=bucket, Prefix="index/")["Contents"]]
    check(objs and all("compacted-" in k for k in objs), f"SSE-KMS bucket after the run: {objs}")
    for k in objs + ["_compaction_state/watermark.json"]:
        h = a3.head_object(Bucket=bucket, Key=k)
        check((h.get("ServerSideEncryption"), h.get("SSEKMSKeyId")) == ("aws:kms", key_arn),
              f"{k}: {h.get('ServerSideEncryption')} {h.get('SSEKMSKeyId')}")
    calls = kms_calls()
    check(calls == {"GenerateDataKey": True, "Decrypt": True}, f"S3's KMS calls with BucketKmsKey: {calls}")
    say(f"4. BucketKmsKeyArn {key_arn}: one statement more, BucketKmsKey = kms:Decrypt + "
        f"kms:GenerateDataKey on that key only; unset: no KMS action. On an SSE-KMS bucket: Success, "
        f"{report['files_compacted']} files compacted, {len(objs)} compacted files + the watermark under "
        f"aws:kms with that key; S3's KMS calls (GenerateDataKey, Decrypt) allowed with it, denied without")

    # 3. Without any one statement (BucketKmsKeyArn set): a failure or a reported error.
    sids = [s["Sid"] for s in with_key]
    for i, sid in enumerate(sids):
        bucket, _ = fresh_bucket()
        rest = [s for s in policy_for(bucket, key_arn)["Statement"] if s["Sid"] != sid]
        attach(bucket, rest)
        time.sleep(0.5)
        if sid == "PublishMetrics":
            # moto 5.2 answers the SDK's CloudWatch protocol (Smithy RPCv2
            # CBOR) with 404, and evaluates no condition but sts:ExternalId:
            # PutMetricData under IAM cannot be run here. The metrics reach
            # the namespace on ministack (tests/support/deployed.py).
            say(f"3. without {sid}: NOT CHECKED on moto (no CloudWatch for the Rust SDK, "
                "no cloudwatch:namespace condition); metrics are checked on ministack")
            continue
        if sid == "BucketKmsKey":
            calls = kms_calls()
            check(calls["GenerateDataKey"] is not True and calls["Decrypt"] is not True,
                  f"without {sid}: S3's KMS calls still allowed ({calls})")
            say(f"3. without {sid}: S3's KMS calls denied ({calls}); moto's S3 makes none itself")
            continue
        if sid in ("WriteLogs", "FailureDestination"):
            calls = lambda_calls()
            check(calls[sid] is not True, f"without {sid}: Lambda's call was still allowed")
            other = "FailureDestination" if sid == "WriteLogs" else "WriteLogs"
            check(calls[other] is True, f"without {sid}: {other} denied too ({calls})")
            say(f"3. without {sid}: Lambda's call denied ({calls[sid]}); not used by the job itself")
            continue
        code, report, stderr = run_job(bucket)
        status, errors = report["last_run_status"], report.get("report_errors", [])
        check(status != "Success" or errors,
              f"without {sid}: the run still succeeded with no reporting error: the statement is superfluous")
        why = report.get("errors") or errors
        check("AccessDenied" in json.dumps(why) or "403" in json.dumps(why),
              f"without {sid}: the error is not a denial: {why}")
        say(f"3. without {sid}: exit {code}, {status}; {str(why)[:200]}")
    attach(bucket, policy_for(bucket, key_arn)["Statement"])
    # 5. The host's prune-cache credential (once: it does not depend on BucketKmsKeyArn).
    prune_cache_policy(args, endpoint, iam, session, fresh_bucket, admin)
    # 6. An operator's status credential.
    status_policy(args, endpoint, iam, session, fresh_bucket, admin)
    say("least privilege: all checks passed")


def prune_cache_policy(args, endpoint, iam, session, fresh_bucket, admin):
    """Check 5: prune-cache needs exactly specs/prune-cache.policy.json."""
    with open(os.path.join(ROOT, "specs", "prune-cache.policy.json")) as f:
        template = f.read()
    bucket, gen = fresh_bucket()
    a3 = admin.client("s3", endpoint_url=endpoint)
    # 07-18 compacted by hand: its per-flight objects gone, the watermark on it.
    for k in gen["index_keys"]["2026-07-18"]:
        a3.delete_object(Bucket=bucket, Key=k)
    a3.put_object(Bucket=bucket, Key="_compaction_state/watermark.json",
                  Body=json.dumps({"last_compacted_date": "2026-07-18"}).encode())
    iam.create_user(UserName="prune-cache")
    key = iam.create_access_key(UserName="prune-cache")["AccessKey"]
    statements = json.loads(template.replace("${BucketName}", bucket))["Statement"]

    def attach(sts):
        iam.put_user_policy(UserName="prune-cache", PolicyName="prune-cache",
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": sts}))
        time.sleep(0.5)

    def mirror():
        d = tempfile.mkdtemp(prefix="lp-cache-")
        for keys in gen["index_keys"].values():
            for k in keys:
                p = os.path.join(d, k[len("index/"):])
                os.makedirs(os.path.dirname(p), exist_ok=True)
                with open(p, "wb") as f:
                    f.write(b"PAR1 copy PAR1")
        return d

    def files(d):
        return sorted(os.path.relpath(os.path.join(r, n), d) for r, _, ns in os.walk(d) for n in ns)

    def prune(d):
        env = {"PATH": os.environ.get("PATH", ""), "S3_BUCKET": bucket, "S3_FORCE_PATH_STYLE": "true",
               "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION,
               "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
               "AWS_EC2_METADATA_DISABLED": "true", "LOG_LEVEL": "warn"}
        return subprocess.run([args.binary, "prune-cache", "--dir", d], env=env, capture_output=True,
                              text=True, timeout=120)

    attach(statements)
    d = mirror()
    p = prune(d)
    check(p.returncode == 0, f"prune-cache under its policy: exit {p.returncode}: {p.stderr[-1500:]}")
    summary = json.loads(p.stdout)
    n18, n19 = len(gen["index_keys"]["2026-07-18"]), len(gen["index_keys"]["2026-07-19"])
    check(summary["files_deleted"] == n18 and summary["kept"] == {"after_watermark": n19},
          f"prune-cache under its policy: {summary['files_deleted']} deleted, kept {summary['kept']}")
    check(len(files(d)) == n19, f"prune-cache left {files(d)}")
    s3 = session(key).client("s3", endpoint_url=endpoint)
    try:
        s3.get_object(Bucket=bucket, Key=gen["index_keys"]["2026-07-19"][0])
        fail("the prune-cache user can read an index object")
    except ClientError as e:
        check(e.response["Error"]["Code"] in ("AccessDenied", "403"), f"index read: {e}")
    say(f"5. prune-cache under specs/prune-cache.policy.json: {n18} copies deleted, {n19} kept; "
        "no index object readable")
    for st in statements:
        attach([s for s in statements if s is not st])
        d = mirror()
        before = files(d)
        p = prune(d)
        check(p.returncode == 1, f"prune-cache without {st['Sid']}: exit {p.returncode}")
        check("AccessDenied" in p.stderr or "403" in p.stderr,
              f"prune-cache without {st['Sid']}: not a denial: {p.stderr[-1500:]}")
        check(files(d) == before, f"prune-cache without {st['Sid']} deleted something")
        say(f"5. prune-cache without {st['Sid']}: exit 1, nothing deleted; {p.stderr.strip()[-160:]}")


def status_policy(args, endpoint, iam, session, fresh_bucket, admin):
    """Check 6: status reads all it shows under exactly specs/status.policy.json."""
    with open(os.path.join(ROOT, "specs", "status.policy.json")) as f:
        template = f.read()
    bucket, gen = fresh_bucket()
    a3 = admin.client("s3", endpoint_url=endpoint)
    a3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    # A recorded mismatch on 07-18 (one flight's index file holding another
    # flight's row): status re-checks it with the run's parity gate, which
    # reads the date's index files to find it.
    gone, other = gen["index_keys"]["2026-07-18"][:2]
    a3.put_object(Bucket=bucket, Key=gone, Body=a3.get_object(Bucket=bucket, Key=other)["Body"].read())
    a3.put_object(Bucket=bucket, Key="_compaction_state/watermark.json", Body=json.dumps({
        "last_compacted_date": "2026-07-17", "mismatch_date": "2026-07-18",
        "mismatch_runs": 1}).encode())
    iam.create_user(UserName="status")
    key = iam.create_access_key(UserName="status")["AccessKey"]
    statements = json.loads(template.replace("${BucketName}", bucket))["Statement"]

    def attach(sts):
        iam.put_user_policy(UserName="status", PolicyName="status",
                            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": sts}))
        time.sleep(0.5)

    def status():
        env = {"PATH": os.environ.get("PATH", ""), "S3_BUCKET": bucket, "S3_FORCE_PATH_STYLE": "true",
               "AWS_ENDPOINT_URL": endpoint, "AWS_REGION": REGION,
               "AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"],
               "AWS_EC2_METADATA_DISABLED": "true", "LOG_LEVEL": "warn"}
        p = subprocess.run([args.binary, "status", "--now", NOW, "--json"], env=env,
                           capture_output=True, text=True, timeout=120)
        return p.returncode, json.loads(p.stdout), p.stderr

    attach(statements)
    code, s, err = status()
    check(code == 0 and not s["errors"], f"status under its policy: exit {code}: {s['errors']} {err[-800:]}")
    missing = (s["mismatch"] or {}).get("missing_uuids") or []
    check(len(missing) == 1 and missing[0] in gone, f"status under its policy: mismatch {s['mismatch']}")
    v = s["versioning"]
    moto_root = "expected VersioningConfiguration" in (v["error"] or "") or "HTTP 200" in (v["error"] or "")
    check((v["versioning"] == "Enabled" and v["error"] is None and v["advice"])
          or (moto_root and "AccessDenied" not in v["error"]),
          f"status under its policy: versioning {v}")
    say(f"6. status under specs/status.policy.json: exit 0, mismatch {missing[0]} re-checked, "
        f"bucket configuration read without a denial ({v['versioning'] or v['error'][:80]})")
    for st in statements:
        attach([x for x in statements if x is not st])
        code, s, err = status()
        if st["Sid"] == "ReadBucketConfiguration":
            v = s["versioning"]
            check(code == 0 and v["error"] and "AccessDenied" in v["error"]
                  and "specs/status.policy.json" in v["error"],
                  f"status without {st['Sid']}: exit {code}, versioning {v}")
            say(f"6. status without {st['Sid']}: versioning unknown: {v['error'][:160]}")
            continue
        why = json.dumps(s["errors"])
        check(code == 1 and ("AccessDenied" in why or "403" in why),
              f"status without {st['Sid']}: exit {code}, not a denial: {why[:800]}")
        say(f"6. status without {st['Sid']}: exit 1; {why[:160]}")


if __name__ == "__main__":
    main()
