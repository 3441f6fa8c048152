"""Side by side: examples/partitioned-wordcount (statestore, two stores, two changelogs) and
the same count in Quix Streams (one RocksDB store, one changelog), on the same broker, the same
input topic and librdkafka's default consumer settings, one instance each. Run by run.sh.

For each, from one run: records/s from its first record to its group offsets reaching the end
of the input; its CPU and the broker's CPU per record over that span; restart-to-first-record
(stopped cleanly, started again on its state, new records waiting); and a restore from empty
(state directory wiped), whose rate is the changelog records over the extra time it took
beyond the plain restart. Writes results.json, results.md and results.png to --out.
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of process `pid` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def now_ms() -> int:
    return int(time.time() * 1000)


class Kafka:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def consumer(self, group: str) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                         "enable.auto.commit": False})

    def partitions(self, topic: str) -> list[int]:
        meta = self.admin.list_topics(topic, timeout=10)
        return sorted(meta.topics[topic].partitions)

    def offsets(self, topic: str) -> list[tuple[int, int]]:
        """(low, high) watermarks of every partition."""
        consumer = self.consumer("peers-watermarks")
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                    for p in self.partitions(topic)]
        finally:
            consumer.close()

    def lag(self, group: str, topic: str) -> int:
        """Records of `topic` past `group`'s committed offsets."""
        consumer = self.consumer(group)
        try:
            parts = [TopicPartition(topic, p) for p in self.partitions(topic)]
            committed = consumer.committed(parts, timeout=10)
            ends = [consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts]
            return sum(end - max(c.offset, 0) for c, end in zip(committed, ends))
        finally:
            consumer.close()

    def changelog_records(self, prefix: str) -> int:
        """Records in every topic whose name starts with `prefix` or contains it."""
        names = [t for t in self.admin.list_topics(timeout=10).topics if prefix in t]
        return sum(high - low for name in names for low, high in self.offsets(name))


class Instance:
    """One process of an application, with its stderr watched for its first record."""

    def __init__(self, command: list[str], first_marker: str, broker_pid: int | None,
                 stop_with_sigterm: bool):
        self.stop_with_sigterm = stop_with_sigterm
        self.started = now_ms()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
        self.first: dict | None = None
        self.log: list[str] = []
        self.broker_pid = broker_pid
        marker = first_marker

        def watch():
            for line in self.process.stderr:
                self.log.append(line.rstrip())
                if self.first is None and marker in line:
                    self.first = self.sample()

        threading.Thread(target=watch, daemon=True).start()

    def sample(self) -> dict:
        return {"ms": now_ms(), "cpu": cpu_seconds(self.process.pid),
                "broker_cpu": cpu_seconds(self.broker_pid) if self.broker_pid else None}

    def wait_first(self, timeout: float) -> dict:
        deadline = time.time() + timeout
        while self.first is None:
            if self.process.poll() is not None or time.time() > deadline:
                raise SystemExit("no first record:\n" + "\n".join(self.log[-20:]))
            time.sleep(0.01)
        return self.first

    def stop(self) -> None:
        """Stops cleanly: SIGTERM for Quix, stdin closed for statestore (`--stop-on-stdin-eof`)."""
        if self.stop_with_sigterm:
            self.process.send_signal(signal.SIGTERM)
        else:
            self.process.stdin.close()
        self.process.wait(timeout=120)


def measure(name, start, kafka, topic, group, state_dir, changelog_prefix, produce, records,
            broker_pid, extra):
    """The figures of one application."""
    print(f"{name}: processing {records} records", file=sys.stderr)
    instance = start(state_dir)
    first = instance.wait_first(120)
    while kafka.lag(group, topic) > 0:
        if instance.process.poll() is not None:
            raise SystemExit(f"{name} exited:\n" + "\n".join(instance.log[-20:]))
        time.sleep(0.05)
    done = instance.sample()
    instance.stop()
    seconds = (done["ms"] - first["ms"]) / 1000
    result = {
        "records_per_s": records / seconds,
        "instance_cpu_us_per_record": (done["cpu"] - first["cpu"]) * 1e6 / records,
        "broker_cpu_us_per_record": ((done["broker_cpu"] - first["broker_cpu"]) * 1e6 / records
                                     if broker_pid else None),
    }
    print(f"{name}: restart on its state", file=sys.stderr)
    produce(extra)
    instance = start(state_dir)
    restart = instance.wait_first(300)["ms"] - instance.started
    instance.stop()
    result["restart_to_first_record_s"] = restart / 1000
    print(f"{name}: restore from empty", file=sys.stderr)
    shutil.rmtree(state_dir)
    produce(extra)
    changelog = kafka.changelog_records(changelog_prefix)
    instance = start(state_dir)
    restore = instance.wait_first(600)["ms"] - instance.started
    instance.stop()
    result["restore_to_first_record_s"] = restore / 1000
    result["changelog_records"] = changelog
    extra_s = max(restore - restart, 1) / 1000
    result["restore_records_per_s"] = changelog / extra_s
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--wordcount", required=True, help="the partitioned-wordcount binary")
    parser.add_argument("--lines", type=int, default=20000, help="input lines (~10 words each)")
    parser.add_argument("--broker-pid", type=int)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads-work-us", type=float, default=0,
                        help="also run statestore alone with 1 and 2 processing threads, each "
                             "record given this much busy CPU work (microseconds)")
    parser.add_argument("--threads-only", action="store_true",
                        help="only the threads run (needs --threads-work-us)")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    kafka = Kafka(args.bootstrap)
    run = f"{os.getpid()}-{int(time.time())}"
    topic = f"peers-words-{run}"
    produced = [args.lines]

    def produce(lines: int) -> None:
        start = produced[0]
        produced[0] += lines
        subprocess.run([args.wordcount, "produce", "--bootstrap", args.bootstrap, "--topic", topic,
                        "--from", str(start), "--lines", str(produced[0])], check=True,
                        stdout=subprocess.DEVNULL)

    subprocess.run([args.wordcount, "produce", "--bootstrap", args.bootstrap, "--topic", topic,
                    "--lines", str(args.lines)], check=True, stdout=subprocess.DEVNULL)
    records = sum(high - low for low, high in kafka.offsets(topic))
    quix = Path(__file__).with_name("quix_wordcount.py")
    ss_app, qx_group = f"peers-ss-{run}", f"peers-qx-{run}"

    def start_statestore(state_dir: Path) -> Instance:
        return Instance([args.wordcount, "run", "--bootstrap", args.bootstrap, "--topic", topic,
                         "--application-id", ss_app, "--state-dir", str(state_dir),
                         "--stop-on-stdin-eof"], "first record of", args.broker_pid, False)

    def start_quix(state_dir: Path) -> Instance:
        return Instance([sys.executable, str(quix), "--bootstrap", args.bootstrap, "--topic", topic,
                         "--group", qx_group, "--state-dir", str(state_dir)],
                        "first record at", args.broker_pid, True)

    if args.threads_work_us > 0:
        # The same number of records with distinct keys: partitions of equal size, where the
        # words' skew makes one task (processed by one thread at a time) the longest.
        keyed = f"peers-keys-{run}"
        subprocess.run([args.wordcount, "produce", "--bootstrap", args.bootstrap, "--topic", keyed,
                        "--lines", str(records), "--distinct-keys"], check=True,
                       stdout=subprocess.DEVNULL)
        scaling = {"words": threads_scaling(args, kafka, topic, records, run),
                   "distinct_keys": threads_scaling(args, kafka, keyed, records, run + "-keys")}
        (out / "threads.json").write_text(json.dumps(scaling, indent=2))
        print(render_threads(scaling))
        (out / "threads.md").write_text(render_threads(scaling))
        if args.threads_only:
            return
    extra = max(args.lines // 100, 100)
    results = {"records": records, "lines": args.lines, "date": time.strftime("%Y-%m-%d %H:%M"),
               "load_average_at_start": os.getloadavg()[0]}
    work = out / "state"
    results["statestore"] = measure("statestore", start_statestore, kafka, topic, ss_app,
                                    work / "statestore", ss_app, produce, records,
                                    args.broker_pid, extra)
    # The same topic for Quix, which reads it from the start under its own group: it holds the
    # records statestore restarted on as well.
    records = sum(high - low for low, high in kafka.offsets(topic))
    results["quix"] = measure("quix", start_quix, kafka, topic, qx_group, work / "quix",
                              qx_group, produce, records, args.broker_pid, extra)
    shutil.rmtree(work, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = render(results)
    (out / "results.md").write_text(table)
    print(table)
    chart(results, out / "results.png")


ROWS = [
    ("records_per_s", "records/s", "{:,.0f}"),
    ("instance_cpu_us_per_record", "instance CPU per record (µs)", "{:.2f}"),
    ("broker_cpu_us_per_record", "broker CPU per record (µs)", "{:.2f}"),
    ("restart_to_first_record_s", "restart to first record (s)", "{:.2f}"),
    ("restore_to_first_record_s", "restore from empty to first record (s)", "{:.2f}"),
    ("changelog_records", "changelog records restored", "{:,}"),
    ("restore_records_per_s", "restore rate (records/s)", "{:,.0f}"),
]


def threads_scaling(args, kafka, topic, records, run) -> dict:
    """statestore alone over the whole input topic with 1 and then 2 processing threads, each
    record given `--threads-work-us` of busy CPU work, a fresh application each time:
    records/s from the first record to the group offsets at the end, and CPU per record."""
    result = {"records": records, "work_us": args.threads_work_us,
              "date": time.strftime("%Y-%m-%d %H:%M"), "load_average_at_start": os.getloadavg()[0],
              "cpus": os.cpu_count()}
    for threads in (1, 2):
        app = f"peers-threads{threads}-{run}"
        state = Path(args.out) / "state" / app
        instance = Instance([args.wordcount, "run", "--bootstrap", args.bootstrap, "--topic", topic,
                             "--application-id", app, "--state-dir", str(state),
                             "--stop-on-stdin-eof", "--threads", str(threads),
                             "--work-us", str(int(args.threads_work_us))],
                            "first record of", args.broker_pid, False)
        first = instance.wait_first(120)
        # Checked twice a second: each check starts a client, CPU the threads would miss.
        while kafka.lag(app, topic) > 0:
            if instance.process.poll() is not None:
                raise SystemExit("statestore exited:\n" + "\n".join(instance.log[-20:]))
            time.sleep(0.5)
        done = instance.sample()
        instance.stop()
        shutil.rmtree(state, ignore_errors=True)
        seconds = (done["ms"] - first["ms"]) / 1000
        result[f"threads_{threads}"] = {
            "records_per_s": records / seconds,
            "instance_cpu_us_per_record": (done["cpu"] - first["cpu"]) * 1e6 / records}
        print(f"{threads} thread(s): {records / seconds:,.0f} records/s", file=sys.stderr)
    return result


def render_threads(results: dict) -> str:
    first = results["words"]
    lines = [f"{first['records']:,} records, {first['work_us']:g} µs of work per record, "
             f"{first['cpus']} CPUs, {first['date']}, load average "
             f"{first['load_average_at_start']:.2f} at the start", "",
             "| input | records/s, 1 thread | 2 threads | ratio | CPU per record (µs), 1 / 2 |",
             "|---|---|---|---|---|"]
    for name, result in results.items():
        one, two = result["threads_1"], result["threads_2"]
        lines.append(f"| {name.replace('_', ' ')} | {one['records_per_s']:,.0f} | "
                     f"{two['records_per_s']:,.0f} | "
                     f"{two['records_per_s'] / one['records_per_s']:.2f}x | "
                     f"{one['instance_cpu_us_per_record']:.2f} / "
                     f"{two['instance_cpu_us_per_record']:.2f} |")
    return "\n".join(lines) + "\n"


def render(results: dict) -> str:
    lines = [f"{results['records']:,} records, {results['date']}, load average "
             f"{results['load_average_at_start']:.2f} at the start", "",
             "| | statestore | Quix Streams | ratio |", "|---|---|---|---|"]
    for key, label, fmt in ROWS:
        ours, theirs = results["statestore"][key], results["quix"][key]
        if ours is None or theirs is None:
            continue
        ratio = f"{ours / theirs:.2f}x" if theirs else "-"
        lines.append(f"| {label} | {fmt.format(ours)} | {fmt.format(theirs)} | {ratio} |")
    return "\n".join(lines) + "\n"


def chart(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("instance_cpu_us_per_record", "instance CPU per record (µs)"),
              ("broker_cpu_us_per_record", "broker CPU per record (µs)"),
              ("records_per_s", "records/s"),
              ("restart_to_first_record_s", "restart to first record (s)")]
    figure, axes = plt.subplots(1, len(panels), figsize=(14, 3.5))
    for axis, (key, label) in zip(axes, panels):
        values = [results["statestore"][key] or 0, results["quix"][key] or 0]
        axis.bar(["statestore", "Quix Streams"], values, color=["#2a6f97", "#c8553d"])
        axis.set_title(label, fontsize=10)
    figure.suptitle(f"{results['records']:,} records, one instance each, {results['date']}")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
