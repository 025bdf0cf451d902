"""The main job, for now: a topic created, produced to and consumed through the ``kop`` CLI on
the embedded local store. (The Spark pipeline demo replaces it when the Spark source and sink land.)

    python -m kop_spark.demo [ROOT]        default ROOT: ./kop-data
"""

from __future__ import annotations

import subprocess
import sys

TOPIC = "demo-events"


def kop(root: str, *args: str, stdin: str | None = None) -> str:
    cmd = [sys.executable, "-m", "kop_spark.cli", "--root", root, *args]
    print("$ kop " + " ".join(args[:1] + tuple(a if " " not in a else repr(a) for a in args[1:])), flush=True)
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"kop {' '.join(args)} failed: {done.stderr.strip()}")
    if done.stdout:
        print(done.stdout, end="", flush=True)
    return done.stdout


def main(argv: list[str]) -> None:
    root = argv[0] if argv else "./kop-data"
    if TOPIC not in kop(root, "topics", "list").split():
        kop(root, "topics", "create", TOPIC, "--partitions", "3")
    events = "".join(f"user-{i % 4}:clicked item {i}\n" for i in range(12))
    kop(root, "produce", TOPIC, "--key-separator", ":", "--header", "source=demo", stdin=events)
    kop(root, "consume", TOPIC, "--from-beginning", "--print-offset", "--print-key", "--max-messages", "12")
    kop(root, "topics", "describe", TOPIC)
    print(f"\nThe store is in {root}; run the commands above with `.venv/bin/kop --root {root} ...`.")


if __name__ == "__main__":
    main(sys.argv[1:])
