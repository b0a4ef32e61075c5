"""Deploys template.yaml into a local AWS emulator (ministack) as `make deploy` would.

    python deploy_local.py --endpoint URL --stack-name NAME --bootstrap PATH --build-dir DIR
                           [--param Key=Value ...] [--without-metric-math-alarms]

Run with the SAM CLI's Python (.tools/sam/bin/python): it uses the SAM CLI's
own template reader and writer, and `sam deploy` itself.

What `sam build` does for this template, done here without a cross build:
the bootstrap given (a host binary: `cargo build`'s, or `cargo lambda
build`'s) is copied to DIR/CompactionFunction/bootstrap and DIR/template.yaml
is template.yaml with the function's CodeUri pointing there. Then `sam deploy`
(which packages: zips the code, uploads it to an artifacts bucket and rewrites
CodeUri to its S3 location), then a change set that creates or updates the
stack, executed without confirmation.

--without-metric-math-alarms leaves out of the deployed copy every
AWS::CloudWatch::Alarm whose Properties has Metrics (metric math): ministack
1.5 refuses to create one ("metric math is not supported"), which would fail
the whole stack. template.yaml itself keeps them; the names left out are
printed (stderr) and their definitions returned in the output under
"left_out" (so that a test can evaluate them itself). What refers to a left-out
alarm's ARN (the dashboard's alarm widget: `${Name.Arn}` in a Sub, or a
GetAtt) gets a stand-in ARN instead, returned under "left_out_arns"
({Name: ARN}).

Prints one JSON object on stdout: {"stack": NAME, "outputs": {Key: Value},
"parameters": {...}, "left_out": {Name: resource}, "template": DIR/template.yaml}.
Everything else goes to stderr.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import boto3
from samcli.yamlhelper import yaml_dump, yaml_parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FUNCTION = "CompactionFunction"


def log(msg):
    print(f"deploy-local: {msg}", file=sys.stderr, flush=True)


def stand_in_arn(name, region):
    """The ARN written where the template refers to a left-out resource."""
    return f"arn:aws:cloudwatch:{region}:000000000000:alarm:{name}-left-out-by-deploy-local"


def replace_refs(value, name, arn):
    """`value` with every `${name.Arn}` of a Sub and every GetAtt of `name` replaced by `arn`."""
    if isinstance(value, dict):
        if set(value) == {"Fn::GetAtt"}:
            target = value["Fn::GetAtt"]
            target = target.split(".", 1) if isinstance(target, str) else target
            if target[0] == name:
                return arn
        if set(value) == {"Fn::Sub"} and isinstance(value["Fn::Sub"], str):
            return {"Fn::Sub": value["Fn::Sub"].replace("${" + name + ".Arn}", arn)}
        return {k: replace_refs(v, name, arn) for k, v in value.items()}
    if isinstance(value, list):
        return [replace_refs(v, name, arn) for v in value]
    return value


def build_template(template_path, bootstrap, build_dir, without_metric_math, region="us-east-1"):
    """The deployable copy of the template and the resource names left out."""
    with open(template_path) as f:
        template = yaml_parse(f.read())
    code_dir = os.path.join(build_dir, FUNCTION)
    shutil.rmtree(code_dir, ignore_errors=True)
    os.makedirs(code_dir)
    shutil.copy2(bootstrap, os.path.join(code_dir, "bootstrap"))
    os.chmod(os.path.join(code_dir, "bootstrap"), 0o755)
    resources = template["Resources"]
    fn = resources[FUNCTION]
    fn["Properties"]["CodeUri"] = code_dir
    # Built already: nothing for `sam build` to do (sam deploy ignores it anyway).
    fn.pop("Metadata", None)
    left_out = {}
    if without_metric_math:
        for name, res in list(resources.items()):
            if res.get("Type") == "AWS::CloudWatch::Alarm" and "Metrics" in res.get("Properties", {}):
                left_out[name] = res
                del resources[name]
        for name in left_out:
            template["Resources"] = resources = replace_refs(resources, name, stand_in_arn(name, region))
            template["Outputs"] = replace_refs(template.get("Outputs", {}), name, stand_in_arn(name, region))
    out = os.path.join(build_dir, "template.yaml")
    with open(out, "w") as f:
        f.write(yaml_dump(template))
    return out, left_out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--stack-name", required=True)
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--template", default=os.path.join(ROOT, "template.yaml"))
    ap.add_argument("--artifacts-bucket", default="sam-artifacts-local")
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--param", action="append", default=[], help="Key=Value (repeatable)")
    ap.add_argument("--without-metric-math-alarms", action="store_true")
    args = ap.parse_args()

    os.makedirs(args.build_dir, exist_ok=True)
    template, left_out = build_template(args.template, args.bootstrap, args.build_dir,
                                        args.without_metric_math_alarms, args.region)
    for name in left_out:
        log(f"left out {name}: a metric-math alarm, which ministack 1.5 cannot create "
            "(template.yaml keeps it for AWS)")

    env = dict(os.environ)
    env.update(AWS_ENDPOINT_URL=args.endpoint, AWS_REGION=args.region, AWS_DEFAULT_REGION=args.region,
               SAM_CLI_TELEMETRY="0")
    env.setdefault("AWS_ACCESS_KEY_ID", "test")
    env.setdefault("AWS_SECRET_ACCESS_KEY", "test")
    for k in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        env.pop(k, None)
    session = boto3.session.Session(aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                                    aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                                    region_name=args.region)
    s3 = session.client("s3", endpoint_url=args.endpoint)
    try:
        s3.create_bucket(Bucket=args.artifacts_bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass

    sam = os.path.join(os.path.dirname(sys.executable), "sam")
    cmd = [sam, "deploy", "--template-file", template, "--stack-name", args.stack_name,
           "--s3-bucket", args.artifacts_bucket, "--s3-prefix", args.stack_name,
           "--region", args.region, "--capabilities", "CAPABILITY_IAM",
           "--no-confirm-changeset", "--no-fail-on-empty-changeset", "--no-progressbar"]
    if args.param:
        # One string of Key="Value" pairs: SAM splits on blanks outside quotes
        # (a schedule such as `rate(1 minute)` has one).
        pairs = []
        for p in args.param:
            key, sep, value = p.partition("=")
            if not sep:
                sys.exit(f"deploy-local: --param {p!r} is not Key=Value")
            value = value.replace("\\", "\\\\").replace('"', '\\"')
            pairs.append(f'{key}="{value}"')
        cmd += ["--parameter-overrides", " ".join(pairs)]
    log(" ".join(cmd))
    # sam's own output is for people: stderr.
    r = subprocess.run(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr, cwd=args.build_dir)
    if r.returncode != 0:
        cfn = session.client("cloudformation", endpoint_url=args.endpoint)
        try:
            for e in cfn.describe_stack_events(StackName=args.stack_name)["StackEvents"][:20]:
                log(f"{e.get('LogicalResourceId')} {e.get('ResourceStatus')} {e.get('ResourceStatusReason', '')}")
        except Exception as e:  # the stack may not exist at all
            log(f"no stack events: {e}")
        sys.exit(f"deploy-local: sam deploy failed with {r.returncode}")

    cfn = session.client("cloudformation", endpoint_url=args.endpoint)
    stack = cfn.describe_stacks(StackName=args.stack_name)["Stacks"][0]
    print(json.dumps({
        "stack": args.stack_name,
        "status": stack["StackStatus"],
        "outputs": {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])},
        "parameters": {p["ParameterKey"]: p.get("ParameterValue") for p in stack.get("Parameters", [])},
        "left_out": left_out,
        "left_out_arns": {name: stand_in_arn(name, args.region) for name in left_out},
        "template": template,
    }, indent=2))


if __name__ == "__main__":
    main()
