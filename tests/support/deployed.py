"""The deployed stack, end to end, on ministack (its `full` extra): run by tests/suite/deployed.rs.

    python deployed.py --bootstrap PATH

PATH is the host binary that `cargo test` built (`provided.al2023` runs it as
`bootstrap`). This script starts ministack and mosquitto on free loopback
ports, deploys template.yaml with scripts/deploy_local.py (`sam deploy`), and
checks, each step printing what it saw:

1. The schedule (`rate(1 minute)`) fires and the run compacts the bucket:
   every day one compacted file holding exactly the generated rows, each once
   (read back with pyarrow by archive.py dump), no per-flight file left.
2. The run's metrics are in the namespace (with the Bucket dimension).
3. The alarms leave INSUFFICIENT_DATA (NoRunAlarm included: a run reported
   within its hour). ministack 1.5 cannot create a
   metric-math alarm (FunctionErrorsAlarm): the deployed copy leaves it out,
   and this script evaluates its expression (`errors - FILL(mismatches, 0)`)
   itself from the two metrics it names, read with GetMetricData.
4. The function's logs are in its log group (LoggingConfig.LogGroup) as JSON
   lines carrying the request id of the invocation.
5. The MQTT password comes from the Secrets Manager secret
   (MqttPasswordSecretArn; MqttPassword is set wrong on purpose and the broker
   refuses wrong passwords), read once per execution environment: after the
   secret is changed, the same environment still publishes.
6. An asynchronous invocation that ends in Mismatch is tried
   MaximumRetryAttempts + 1 times (counted in the function's own log lines:
   ministack's failure record says approximateInvokeCount 3 whatever the
   count; MaximumRetryAttempts is left at its default, see below) and lands in the failure queue with its error type and the report.
7. A second stack whose secret does not exist: the run is a Success (the
   compaction happened) and report_errors names the secret. Its bucket has
   SSE-KMS default encryption and the stack BucketKmsKeyArn set: the deployed
   role (GetRolePolicy) grants kms:Decrypt and kms:GenerateDataKey on that
   key only, the first stack's role no KMS action; the compacted file is
   encrypted with the key (ministack itself checks no KMS permission).
8. The dashboard (after 3): named after the stack, in the stack's outputs
   (name and console URL), read back with GetDashboard: every metric it
   graphs is one the function published in this run (ListMetrics: the
   stack's namespace, the single dimension Bucket = the stack's bucket),
   each graph the issue asks for is there (runs by status, files compacted
   and rows written, duration with the function's timeout, watermark lag,
   mismatch_runs, delete failures), and its alarm widget lists the stack's
   five alarms (ministack's stand-in ARN for FunctionErrorsAlarm, which it
   cannot create).
9. Alarms that clear (after 6): MismatchRunsThreshold is 1, so
   the Mismatch of 6 fires MismatchRunsAlarm; the missing index rows are
   then written as the archive writer would, and the first run after that
   (a synchronous invocation, not the next schedule) returns the alarm to
   OK within minutes.

Exits non-zero with the reason on the first check that fails.
"""
import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time

import boto3
import paho.mqtt.client as mqtt

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOOLS = os.environ.get("TOOLS_DIR") or os.path.join(ROOT, ".tools")
REGION = "us-east-1"
T0 = time.time()


def say(msg):
    print(f"[{time.time() - T0:6.1f} s] {msg}", flush=True)


def fail(msg):
    say(f"FAILED: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """tests/support/serve.py KIND PORT: stopped when this script exits (stdin EOF).

    serve.py refuses a port another process took since free_port() found it
    free (deployed.py and least_privilege.py run in parallel): then another
    port is tried, three times at most, as tests/common's start_server does."""

    def __init__(self, kind, env=None):
        for _ in range(3):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "serve.py"), kind, str(self.port)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env={**os.environ, **(env or {})})
            line = self.proc.stdout.readline().decode().strip()
            if line == "ready":
                break
            self.proc.wait()
        check(line == "ready", f"{kind} did not start; see {tempfile.gettempdir()}/ac-{kind}-{self.port}.log")
        self.log = os.path.join(tempfile.gettempdir(), f"ac-{kind}-{self.port}.log")


def wait_for(what, fn, timeout, every=1.0):
    """fn() until it returns something truthy; fails after `timeout` seconds."""
    deadline = time.time() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.time() > deadline:
            fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def archive(cmd, endpoint, bucket, spec=None, prefix=None):
    args = [os.path.join(TOOLS, "py", "bin", "python"), os.path.join(HERE, "archive.py"), cmd,
            "--endpoint", endpoint, "--bucket", bucket]
    if prefix is not None:
        args += ["--prefix", prefix]
    out = subprocess.run(args, input=json.dumps(spec) if spec is not None else "",
                         capture_output=True, text=True)
    check(out.returncode == 0, f"archive.py {cmd}: {out.stderr}")
    return json.loads(out.stdout)


def deploy(endpoint, stack, bootstrap, build_dir, params):
    cmd = [os.path.join(TOOLS, "sam", "bin", "python"), os.path.join(ROOT, "scripts", "deploy_local.py"),
           "--endpoint", endpoint, "--stack-name", stack, "--bootstrap", bootstrap,
           "--build-dir", build_dir, "--without-metric-math-alarms"]
    for k, v in params.items():
        cmd += ["--param", f"{k}={v}"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr)
        fail(f"deploying {stack} failed")
    result = json.loads(out.stdout)
    check(result["status"] == "CREATE_COMPLETE", f"{stack}: {result['status']}")
    return result


def day_prefix(d):
    return f"index/year={d.year:04d}/month={d.month:02d}/day={d.day:02d}/"


def sort_key(r):
    return json.dumps(r, sort_keys=True)


def check_compacted(objects, generated, days):
    """Every day in `days`: one compacted file, exactly the generated rows, each once."""
    for d in days:
        prefix = day_prefix(d)
        keys = [k for k in objects if k.startswith(prefix)]
        compacted = [k for k in keys if k[len(prefix):].startswith("compacted-")]
        others = [k for k in keys if k not in compacted]
        check(len(compacted) == 1, f"{d}: expected one compacted file, found {compacted}")
        check(not others, f"{d}: per-flight files left: {others}")
        got = sorted(objects[compacted[0]]["rows"], key=sort_key)
        want = sorted(generated["rows"][d.isoformat()], key=sort_key)
        check(len(got) == len(want), f"{d}: {len(got)} rows, expected {len(want)}")
        check(got == want, f"{d}: the compacted rows differ from the generated ones")
        keys_once = [r["s3_key"] for r in got]
        check(len(set(keys_once)) == len(keys_once), f"{d}: a flight appears twice")
    return sum(len(generated["rows"][d.isoformat()]) for d in days)


def log_events(logs, group):
    events, token = [], None
    while True:
        kw = {"logGroupName": group}
        if token:
            kw["nextToken"] = token
        page = logs.filter_log_events(**kw)
        events += page.get("events", [])
        token = page.get("nextToken")
        if not token or not page.get("events"):
            return events


def json_lines(events):
    """(stream, parsed JSON) for every log event that is a JSON object."""
    out = []
    for e in events:
        msg = e["message"].strip()
        if msg.startswith("{"):
            try:
                out.append((e["logStreamName"], json.loads(msg)))
            except ValueError:
                pass
    return out


def runs_started(events, event_id=None):
    """The "run starting" JSON lines (optionally those of the event `event_id`:
    every retry of one asynchronous invocation carries its event's id; its
    time is no key, the scheduled run may have started in the same second)."""
    return [(s, j) for s, j in json_lines(events)
            if j.get("fields", {}).get("message") == "run starting"
            and (event_id is None or j["fields"].get("event_id") == event_id)]


def retained(port, topic, user, password, timeout=10):
    """The retained payload of `topic` on the broker, or None."""
    got = {}
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"deployed-test-{os.getpid()}")
    c.username_pw_set(user, password)
    c.on_message = lambda _c, _u, m: got.setdefault(m.topic, m.payload.decode())
    c.connect("127.0.0.1", port)
    c.subscribe(topic, qos=1)
    c.loop_start()
    deadline = time.time() + timeout
    while topic not in got and time.time() < deadline:
        time.sleep(0.1)
    c.loop_stop()
    c.disconnect()
    return got.get(topic)


def resolve(value, refs):
    """A left-out resource's property with its Refs resolved (the only intrinsic it uses)."""
    if isinstance(value, dict):
        if set(value) == {"Ref"}:
            return refs[value["Ref"]]
        return {k: resolve(v, refs) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, refs) for v in value]
    return value


def metric_math(cw, alarm, refs, start, end):
    """FunctionErrorsAlarm's value over [start, end], computed here: ministack
    provisions no metric-math alarm and GetMetricData evaluates no Expression,
    so the two MetricStat queries are read and the template's expression (it
    must be exactly `errors - FILL(mismatches, 0)`) applied to their sums."""
    metrics = resolve(alarm["Properties"]["Metrics"], refs)
    expr = [m for m in metrics if "Expression" in m]
    check(len(expr) == 1 and expr[0]["Expression"] == "errors - FILL(mismatches, 0)",
          f"FunctionErrorsAlarm's expression changed ({expr}): update this evaluation")
    queries = [{"Id": m["Id"], "MetricStat": {**m["MetricStat"], "Stat": m["MetricStat"]["Stat"]},
                "ReturnData": True} for m in metrics if "MetricStat" in m]
    res = cw.get_metric_data(MetricDataQueries=queries, StartTime=start, EndTime=end)
    sums = {r["Id"]: sum(r.get("Values", [])) for r in res["MetricDataResults"]}
    return sums.get("errors", 0) - sums.get("mismatches", 0), sums


def role_statements(cfn, iam, stack_name):
    """The deployed CompactionRole's inline policy statements (GetRolePolicy)."""
    role = [r["PhysicalResourceId"] for r in cfn.describe_stack_resources(StackName=stack_name)["StackResources"]
            if r["LogicalResourceId"] == "CompactionRole"]
    check(len(role) == 1, f"{stack_name}: CompactionRole {role}")
    doc = iam.get_role_policy(RoleName=role[0], PolicyName="archive-compaction")["PolicyDocument"]
    if isinstance(doc, str):
        import urllib.parse
        doc = json.loads(urllib.parse.unquote(doc))
    return doc["Statement"]


# What each of the dashboard's graphs must show, by metric name.
DASHBOARD_GRAPHS = {
    "runs by status": {"RunSuccess", "RunMismatch", "RunFailure"},
    "files compacted and rows written": {"FilesCompacted", "RowsWritten"},
    "duration": {"RunDurationSeconds"},
    "watermark lag": {"WatermarkLagDays"},
    "mismatch_runs": {"MismatchRuns"},
    "delete failures": {"FilesDeleteFailed"},
}


def dashboard_metrics(widget):
    """(namespace, name, dimensions) of each metric of a metric widget, with
    CloudWatch's "." shorthand (same as the row above) resolved; anything else
    than a plain metric (an expression, a search) is refused."""
    out, previous = [], []
    for row in widget["properties"]["metrics"]:
        fields = [f for f in row if not isinstance(f, dict)]
        fields = [previous[i] if f == "." and i < len(previous) else f for i, f in enumerate(fields)]
        check(len(fields) >= 2 and len(fields) % 2 == 0 and "." not in fields,
              f"dashboard metric {row}: not namespace, name, dimension pairs")
        previous = fields
        dims = tuple(sorted(zip(fields[2::2], fields[3::2])))
        out.append((fields[0], fields[1], dims))
    return out


def check_dashboard(cw, lam, stack, stack_name, fn, namespace, bucket, alarm_names):
    outputs = stack["outputs"]
    name = outputs.get("DashboardName")
    check(name == stack_name, f"DashboardName output {name!r}, expected the stack's name {stack_name!r}")
    url = outputs.get("DashboardUrl", "")
    check(url.endswith(f"#dashboards/dashboard/{name}") and f"region={REGION}" in url,
          f"DashboardUrl output {url!r}")
    body = json.loads(cw.get_dashboard(DashboardName=name)["DashboardBody"])
    widgets = body["widgets"]
    published = {(m["Namespace"], m["MetricName"],
                  tuple(sorted((d["Name"], d["Value"]) for d in m.get("Dimensions", []))))
                 for m in cw.list_metrics(Namespace=namespace)["Metrics"]}
    graphed = []
    for w in widgets:
        if w["type"] != "metric":
            continue
        check(w["properties"].get("region") == REGION, f"widget {w['properties'].get('title')}: region")
        for m in dashboard_metrics(w):
            check(m in published, f"dashboard widget {w['properties'].get('title')!r} graphs {m}, "
                  f"which the function did not publish (published: {sorted(published)})")
            check(m[2] == (("Bucket", bucket),), f"{m}: dimensions are not exactly Bucket={bucket}")
            graphed.append((w, m[1]))
    names = {n for _, n in graphed}
    for graph, want in DASHBOARD_GRAPHS.items():
        check(want <= names, f"the dashboard has no {graph} graph ({sorted(want - names)} missing)")
    timeout = lam.get_function_configuration(FunctionName=fn)["Timeout"]
    duration = [w for w, n in graphed if n == "RunDurationSeconds"][0]
    marks = [a["value"] for a in duration["properties"].get("annotations", {}).get("horizontal", [])]
    check(marks == [timeout], f"the duration graph's line {marks} is not the function's timeout {timeout}")
    arns = {a["AlarmName"]: a["AlarmArn"] for a in cw.describe_alarms(AlarmNames=alarm_names)["MetricAlarms"]}
    alarm_widgets = [w for w in widgets if w["type"] == "alarm"]
    check(len(alarm_widgets) == 1, f"{len(alarm_widgets)} alarm widgets")
    listed = alarm_widgets[0]["properties"]["alarms"]
    want = set(arns.values()) | set(stack["left_out_arns"].values())
    check(len(listed) == 5 and set(listed) == want, f"alarm widget lists {listed}, expected {sorted(want)}")
    say(f"8. dashboard {name} ({url}): {len(widgets)} widgets; graphs {sorted(names)}, each published "
        f"by the run in {namespace} with Bucket={bucket}; duration line at the timeout {timeout} s; "
        f"alarms {sorted(arns)} + {sorted(stack['left_out_arns'])} (stand-in, not on ministack)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ac-deployed-")

    # The broker: user `compaction` with a password; wrong passwords refused.
    user, password = "compaction", "s3cret-from-secrets-manager"
    pwfile = os.path.join(work, "mosquitto.passwd")
    subprocess.run(["mosquitto_passwd", "-c", "-b", pwfile, user, password], check=True,
                   capture_output=True)
    # mosquitto drops root privileges: it must be able to read the file.
    os.chmod(work, 0o755)
    os.chmod(pwfile, 0o644)
    broker = Server("mosquitto", {"MOSQUITTO_PASSWORD_FILE": pwfile})
    ms = Server("ministack-full", {"MINISTACK_LOG_LEVEL": "WARNING"})
    endpoint = f"http://127.0.0.1:{ms.port}"
    say(f"ministack (full) on {endpoint} (log {ms.log}), mosquitto on :{broker.port}")
    session = boto3.session.Session(aws_access_key_id="test", aws_secret_access_key="test",
                                    region_name=REGION)
    client = lambda name: session.client(name, endpoint_url=endpoint)  # noqa: E731
    cfn, lam, logs, cw, sqs, sm, events = (client(n) for n in
                                           ("cloudformation", "lambda", "logs", "cloudwatch", "sqs",
                                            "secretsmanager", "events"))

    # The archive: three complete days before the cutoff (LagDays 2).
    today = dt.datetime.now(dt.timezone.utc).date()
    days = [today - dt.timedelta(days=n) for n in (6, 5, 4)]
    bucket = f"deployed-{os.getpid()}"
    generated = archive("gen", endpoint, bucket, {"seed": 14, "days": [
        {"date": days[0].isoformat(), "flights": 30},
        {"date": days[1].isoformat(), "flights": 25, "foreign": False},
        {"date": days[2].isoformat(), "flights": 20},
    ]})
    say(f"archive in s3://{bucket}: {', '.join(d.isoformat() for d in days)}")

    secret_arn = sm.create_secret(Name="archive-compaction/mqtt-password", SecretString=password)["ARN"]
    say(f"secret {secret_arn}")
    namespace = "SkyFollower/ArchiveCompaction"
    topic_root = f"deployed-test-{os.getpid()}"
    params = {
        "BucketName": bucket,
        "Architecture": "x86_64" if os.uname().machine == "x86_64" else "arm64",
        "ScheduleExpression": "rate(1 minute)",
        # MaximumRetryAttempts stays at its default (2): ministack applies the
        # SAM transform without the stack's parameter values, so the
        # EventInvokeConfig that SAM generates (whose fields the transform
        # resolves itself) always gets the parameter's default. AWS passes
        # the values; nothing in template.yaml works around this.
        "MetricsNamespace": namespace,
        # 9.: the one Mismatch of 6 fires MismatchRunsAlarm.
        "MismatchRunsThreshold": "1",
        "MqttHost": "127.0.0.1",
        "MqttPort": str(broker.port),
        "MqttUsername": user,
        # Wrong on purpose: the secret must win.
        "MqttPassword": "not-the-password",
        "MqttPasswordSecretArn": secret_arn,
        "MqttTopicRoot": topic_root,
    }
    deployed_at = time.time()
    stack = deploy(endpoint, "ac-deployed", args.bootstrap, os.path.join(work, "build"), params)
    out = stack["outputs"]
    fn, group, queue = out["FunctionName"], out["LogGroupName"], out["FailureQueueUrl"]
    say(f"stack ac-deployed CREATE_COMPLETE in {time.time() - deployed_at:.1f} s: function {fn}, "
        f"log group {group}; left out (ministack): {list(stack['left_out'])}")
    conf = lam.get_function_configuration(FunctionName=fn)
    check(conf["Runtime"] == "provided.al2023", conf["Runtime"])
    check(conf["Architectures"] == [params["Architecture"]], f"architectures {conf['Architectures']}")
    check(conf["Environment"]["Variables"]["MQTT_PASSWORD_SECRET_ARN"] == secret_arn, "secret env")
    eic = lam.get_function_event_invoke_config(FunctionName=fn, Qualifier="$LATEST")
    retries = int(stack["parameters"]["MaximumRetryAttempts"])
    check(eic["MaximumRetryAttempts"] == retries, f"event invoke config {eic}")
    check(eic["DestinationConfig"]["OnFailure"]["Destination"].endswith(queue.rsplit("/", 1)[1]),
          f"failure destination {eic['DestinationConfig']}")
    rules = [r for r in cfn.describe_stack_resources(StackName="ac-deployed")["StackResources"]
             if r["ResourceType"] == "AWS::Events::Rule"]
    check(len(rules) == 1, f"schedule rules: {rules}")
    rule = rules[0]["PhysicalResourceId"]
    check(events.describe_rule(Name=rule)["ScheduleExpression"] == "rate(1 minute)", "schedule")

    # 1. The schedule fires (ministack ticks every 10 s: within ~70 s).
    say("waiting for the scheduled run (rate(1 minute))")
    started = wait_for("the scheduled run to start", lambda: runs_started(log_events(logs, group)), 150, 2)
    stream, first = started[0]
    request_id = first["fields"]["invocation_id"]
    say(f"scheduled run started: request {request_id}, {time.time() - deployed_at:.0f} s after the deploy")

    def finished():
        evs = [e for e in log_events(logs, group) if e["logStreamName"] == stream]
        return evs if any(e["message"].startswith(f"REPORT RequestId: {request_id}") for e in evs) else None
    stream_events = wait_for("the scheduled run to end", finished, 120, 1)
    # One scheduled run is enough: no second one while the rest is checked.
    events.disable_rule(Name=rule)
    objects = archive("dump", endpoint, bucket, prefix="")
    rows = check_compacted(objects, generated, days)
    wm = objects.get("_compaction_state/watermark.json", {}).get("json") or {}
    say(f"1. the scheduled run compacted {rows} rows over {len(days)} days, each flight once "
        f"(pyarrow); watermark {wm.get('watermark') or wm}")
    # Its event was EventBridge's: the run's invocation time is the event's.
    check(first["fields"].get("now"), f"run starting line without the invocation time: {first}")

    # 4. Logs: JSON lines with the request id, in the template's log group.
    lines = [j for s, j in json_lines(stream_events)]
    check(any(e["message"].startswith(f"START RequestId: {request_id}") for e in stream_events),
          "no START line for the request")
    with_id = [j for j in lines if request_id in json.dumps(j)]
    check(len(with_id) >= 2, f"JSON lines carrying the request id: {len(with_id)} of {len(lines)}")
    check(all("level" in j and "fields" in j for j in lines), "a log line is not tracing JSON")
    say(f"4. log group {group}: {len(lines)} JSON lines in stream {stream}, {len(with_id)} with the "
        f"request id (e.g. {json.dumps(with_id[0])[:160]}...)")

    # 2. Metrics in the namespace.
    def metric_names():
        ms_ = cw.list_metrics(Namespace=namespace)["Metrics"]
        names = {m["MetricName"] for m in ms_ if {"Name": "Bucket", "Value": bucket} in m.get("Dimensions", [])}
        return names if {"RunSuccess", "FilesCompacted", "WatermarkLagDays"} <= names else None
    names = wait_for("the run's metrics", metric_names, 30)
    now = dt.datetime.now(dt.timezone.utc)
    stat = cw.get_metric_statistics(Namespace=namespace, MetricName="FilesCompacted",
                                    Dimensions=[{"Name": "Bucket", "Value": bucket}],
                                    StartTime=now - dt.timedelta(hours=1), EndTime=now + dt.timedelta(minutes=5),
                                    Period=3600, Statistics=["Sum"])
    files = sum(p["Sum"] for p in stat["Datapoints"])
    n_inputs = sum(len(v) for v in generated["index_keys"].values()) if generated.get("index_keys") else None
    check(files > 0, f"FilesCompacted sum {files}")
    if n_inputs is not None:
        check(files == n_inputs, f"FilesCompacted {files}, expected {n_inputs}")
    say(f"2. metrics in {namespace} (Bucket={bucket}): {sorted(names)}; FilesCompacted sum {files:g}")

    # 3. Alarms leave INSUFFICIENT_DATA.
    alarm_names = [r["PhysicalResourceId"] for r in
                   cfn.describe_stack_resources(StackName="ac-deployed")["StackResources"]
                   if r["ResourceType"] == "AWS::CloudWatch::Alarm"]
    check(len(alarm_names) == 4, f"alarms deployed: {alarm_names}")

    def alarm_states():
        a = cw.describe_alarms(AlarmNames=alarm_names)["MetricAlarms"]
        states = {x["AlarmName"]: x["StateValue"] for x in a}
        return states if len(states) == 4 and "INSUFFICIENT_DATA" not in states.values() else None
    states = wait_for("the alarms to leave INSUFFICIENT_DATA", alarm_states, 30)
    check(all(v == "OK" for v in states.values()), f"alarm states after a healthy run: {states}")
    refs = {"CompactionFunction": fn, "MetricsNamespace": namespace, "BucketName": bucket}
    alarm = stack["left_out"]["FunctionErrorsAlarm"]
    value, sums = metric_math(cw, alarm, refs, now - dt.timedelta(hours=1), now + dt.timedelta(minutes=5))
    check(value == 0, f"FunctionErrorsAlarm after a Success: {value} ({sums})")
    say(f"3. alarms {states}; FunctionErrorsAlarm (evaluated here) {value:g} ({sums}) -> OK")

    # 8. The dashboard.
    check_dashboard(cw, lam, stack, "ac-deployed", fn, namespace, bucket, alarm_names)

    # 5. The password came from the secret (MqttPassword is wrong).
    status = retained(broker.port, f"{topic_root}/statistic/last_run_status", user, password)
    check(status == "Success", f"retained last_run_status on the broker: {status!r}")
    published = [j for j in lines if j.get("fields", {}).get("message", "").startswith("MQTT statistics")]
    check(published, "no 'MQTT statistics ... published' line in the run's log")
    # Once per execution environment: change the secret; the warm environment keeps the value it read.
    sm.put_secret_value(SecretId=secret_arn, SecretString="changed-after-the-first-read")
    r = lam.invoke(FunctionName=fn, Payload=json.dumps({"now": now.isoformat()}).encode())
    report = json.loads(r["Payload"].read())
    check("FunctionError" not in r, f"synchronous run failed: {report}")
    check(report["last_run_status"] == "Success" and report["report_errors"] == [],
          f"second run in the same environment: {report.get('last_run_status')} {report.get('report_errors')}")
    say("5. MQTT published with the secret's password (MqttPassword is wrong); after the secret "
        "changed, the next run in the same environment published again: read once, cached")

    # 6. An asynchronous invocation ending in Mismatch: retried, then the failure queue.
    # The date is before the cutoff (an invocation time ahead of the wall
    # clock is refused: run::MAX_CLOCK_SKEW), and after the watermark, set
    # back by hand to the day before it (the scheduled run passed it empty;
    # the schedule is disabled since).
    later = today - dt.timedelta(days=3)
    gen2 = archive("gen", endpoint, bucket, {"seed": 15, "days": [
        {"date": later.isoformat(), "flights": 12, "unindexed": 2}]})
    s3 = client("s3")
    s3.put_object(Bucket=bucket, Key="_compaction_state/watermark.json",
                  Body=json.dumps({"last_compacted_date": (later - dt.timedelta(days=1)).isoformat()}).encode())
    at = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(seconds=5)
    event = {"id": f"retry-{os.getpid()}", "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
             "detail-type": "Scheduled Event", "source": "aws.events"}
    lam.invoke(FunctionName=fn, InvocationType="Event", Payload=json.dumps(event).encode())
    say(f"6. async invocation {event['id']} (time {event['time']}), {later} misses 2 index rows")

    def failure_record():
        m = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=1, WaitTimeSeconds=1).get("Messages")
        return m[0] if m else None
    msg = wait_for("the failure queue's record", failure_record, 90, 0.5)
    record = json.loads(msg["Body"])
    check(record["requestPayload"] == event, f"failure record's payload: {record['requestPayload']}")
    resp = record["responsePayload"]
    check(resp.get("errorType") == "Mismatch", f"failure record's errorType: {resp.get('errorType')}")
    failed = json.loads(resp["errorMessage"])
    check(failed["last_run_status"] == "Mismatch" and failed["mismatch_date"] == later.isoformat(),
          f"report in the failure record: {failed.get('last_run_status')} {failed.get('mismatch_date')}")
    check(sorted(failed["mismatch_uuids"]) == sorted(gen2["missing"][later.isoformat()]),
          f"missing flights {failed['mismatch_uuids']} vs {gen2['missing']}")
    # Same event id on every attempt: the mismatch is counted once.
    check(failed["mismatch_runs"] == 1, f"mismatch_runs {failed['mismatch_runs']} (counted per retry?)")
    attempts = runs_started(log_events(logs, group), event["id"])
    check(len(attempts) == retries + 1, f"attempts of the async invocation: {len(attempts)}, expected "
          f"MaximumRetryAttempts + 1 = {retries + 1}")
    say(f"   tried {len(attempts)} times (MaximumRetryAttempts {retries} + 1, counted in the function's log; "
        f"ministack's record says approximateInvokeCount {record['requestContext'].get('approximateInvokeCount')}"
        " whatever the count), then the failure queue: errorType Mismatch, mismatch_date "
        f"{failed['mismatch_date']}, {failed['mismatch_uuid_count']} flights, mismatch_runs 1")
    # ministack counts AWS/Lambda Errors for synchronous invocations only (the
    # async attempts above publish Errors 0): one synchronous Mismatch more.
    r = lam.invoke(FunctionName=fn, Payload=json.dumps(event).encode())
    check(r.get("FunctionError") and json.loads(r["Payload"].read())["errorType"] == "Mismatch",
          "the synchronous re-run is not a Mismatch error")
    last_mismatch_at = time.time()
    end = dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5)
    value, sums = wait_for("the Errors metric", lambda: (lambda v: v if v[1].get("errors", 0) >= 1 else None)(
        metric_math(cw, alarm, refs, now - dt.timedelta(hours=1), end)), 20)
    check(value <= 0, f"FunctionErrorsAlarm after Mismatch runs only: {value} ({sums})")
    say(f"   FunctionErrorsAlarm (evaluated here): errors {sums.get('errors', 0):g} - mismatches "
        f"{sums.get('mismatches', 0):g} = {value:g}, not above 0: Mismatch runs do not page as failures "
        "(ministack counts Errors for synchronous invocations only)")

    # 9. Alarms that clear: the Mismatch fired MismatchRunsAlarm (threshold 1);
    # the fix (the index rows written) and one run return it to OK.
    mismatch_alarm = [n for n in alarm_names if "MismatchRunsAlarm" in n]
    check(len(mismatch_alarm) == 1, f"MismatchRunsAlarm among {alarm_names}")
    mismatch_alarm = mismatch_alarm[0]

    def alarm_state(name):
        return cw.describe_alarms(AlarmNames=[name])["MetricAlarms"][0]["StateValue"]
    wait_for("MismatchRunsAlarm to fire after the Mismatch", lambda: alarm_state(mismatch_alarm) == "ALARM", 180, 2)
    missing = set(gen2["missing"][later.isoformat()])
    for key in gen2["flights"][later.isoformat()]:
        if any(u in key for u in missing):
            archive("put-row", endpoint, bucket, {"date": later.isoformat(), "flight_key": key})
    # The fixing run in a later minute than the last Mismatch (one-minute
    # periods: two runs in one minute share a period, whose Maximum is the
    # Mismatch's; ministack evaluates the last 60 s at each PutMetricData).
    time.sleep(max(0.0, 62 - (time.time() - last_mismatch_at)))
    fixed_at = time.time()
    r = lam.invoke(FunctionName=fn, Payload=b"{}")
    report = json.loads(r["Payload"].read())
    check("FunctionError" not in r and report["last_run_status"] == "Success" and report["mismatch_runs"] == 0,
          f"the fixing run: {report.get('last_run_status')} mismatch_runs {report.get('mismatch_runs')}")
    wait_for("MismatchRunsAlarm back to OK after the fixing run", lambda: alarm_state(mismatch_alarm) == "OK", 240, 2)
    say(f"9. MismatchRunsAlarm ALARM after the Mismatch; the index rows written, one run (Success, "
        f"mismatch_runs 0) and it is OK {time.time() - fixed_at:.0f} s later, not the next day")

    # 7. A missing secret: reported, never a failed compaction. This stack's
    # bucket is SSE-KMS (BucketKmsKeyArn set), the first one's is not.
    bucket2 = f"deployed-nosecret-{os.getpid()}"
    key_arn = client("kms").create_key(Description="deployed-test bucket key")["KeyMetadata"]["Arn"]
    s3 = client("s3")
    s3.create_bucket(Bucket=bucket2)
    s3.put_bucket_encryption(Bucket=bucket2, ServerSideEncryptionConfiguration={"Rules": [{
        "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key_arn}}]})
    gen3 = archive("gen", endpoint, bucket2, {"seed": 16, "days": [{"date": days[0].isoformat(), "flights": 10}]})
    missing_arn = secret_arn.rsplit(":", 1)[0] + ":does-not-exist-AbCdEf"
    deploy(endpoint, "ac-deployed-nosecret", args.bootstrap, os.path.join(work, "build2"),
           {**params, "BucketName": bucket2, "ScheduleState": "DISABLED", "MqttPasswordSecretArn": missing_arn,
            "MqttTopicRoot": topic_root + "-2", "BucketKmsKeyArn": key_arn})
    iam = client("iam")
    kms_first = [st for st in role_statements(cfn, iam, "ac-deployed") if "kms:" in json.dumps(st).lower()]
    check(kms_first == [], f"the stack without BucketKmsKeyArn grants KMS: {kms_first}")
    kms_second = [st for st in role_statements(cfn, iam, "ac-deployed-nosecret") if "kms:" in json.dumps(st).lower()]
    check(kms_second == [{"Sid": "BucketKmsKey", "Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                          "Resource": key_arn}], f"the deployed role's KMS statements: {kms_second}")
    say(f"7. BucketKmsKeyArn {key_arn}: the deployed role grants kms:Decrypt and kms:GenerateDataKey on "
        "that key only (the first stack, without it: no KMS action)")
    fn2 = cfn.describe_stacks(StackName="ac-deployed-nosecret")["Stacks"][0]["Outputs"]
    fn2 = {o["OutputKey"]: o["OutputValue"] for o in fn2}["FunctionName"]
    r = lam.invoke(FunctionName=fn2, Payload=json.dumps({"now": now.isoformat()}).encode())
    report = json.loads(r["Payload"].read())
    check("FunctionError" not in r, f"a missing secret failed the run: {report}")
    errors = report["report_errors"]
    check(report["last_run_status"] == "Success" and len(errors) == 1
          and errors[0].startswith(f"MQTT password secret {missing_arn}:"),
          f"missing secret: {report['last_run_status']} {errors}")
    dumped = archive("dump", endpoint, bucket2, prefix="")
    check_compacted(dumped, gen3, [days[0]])
    compacted = [k for k in dumped if "/compacted-" in k]
    sse = {k: (lambda h: (h.get("ServerSideEncryption"), h.get("SSEKMSKeyId")))(s3.head_object(Bucket=bucket2, Key=k))
           for k in compacted}
    check(compacted and all(v == ("aws:kms", key_arn) for v in sse.values()), f"compacted file encryption: {sse}")
    say(f"7. missing secret: Success, {report['files_compacted']} files compacted (into an SSE-KMS bucket: "
        f"the compacted file is aws:kms with the key), report_errors {errors}")
    say("deployed stack: all checks passed")


if __name__ == "__main__":
    main()
