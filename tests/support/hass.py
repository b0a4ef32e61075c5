"""Home Assistant for tests/suite/home_assistant.rs: runs `hass` and reads its recorder.

    python hass.py run HASS CONFIG_DIR
        Starts `HASS --skip-pip -c CONFIG_DIR` in a session of its own and prints
        "started". A line "stop" on stdin (or EOF, when the test process dies)
        stops it with SIGTERM, so that it writes its registries and closes the
        recorder; SIGKILL after 60 s. Then prints "stopped RC".

    python hass.py states DB PREFIX
        Prints every recorded state of the entities whose id starts with PREFIX
        (the recorder's `states` joined with `states_meta` and
        `state_attributes`), oldest first, one JSON array a line:
        [entity_id, state, attributes or null]. Opens the database read-only.
"""
import json
import os
import sqlite3
import subprocess
import sys

import stdin_guard


def run(hass, config_dir):
    log = open(os.path.join(config_dir, "hass.stdout.log"), "wb")
    proc = subprocess.Popen(
        [hass, "--skip-pip", "-c", config_dir],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    print("started", flush=True)
    try:
        stdin_guard.wait_for_close(stop_line="stop")
    finally:
        if proc.poll() is None:
            stdin_guard.stop_group(proc, grace=60)
        print(f"stopped {proc.returncode}", flush=True)


def states(db, prefix):
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    rows = con.execute(
        "SELECT m.entity_id, s.state, a.shared_attrs FROM states s"
        " JOIN states_meta m ON m.metadata_id = s.metadata_id"
        " LEFT JOIN state_attributes a ON a.attributes_id = s.attributes_id"
        " WHERE m.entity_id LIKE ? ORDER BY s.state_id",
        (prefix + "%",),
    )
    for entity_id, state, attrs in rows:
        print(json.dumps([entity_id, state, json.loads(attrs) if attrs else None]))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "states":
        states(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
