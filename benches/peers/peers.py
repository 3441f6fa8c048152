"""Side by side on one broker and one input topic, one instance at a time:
examples/partitioned-wordcount (statestore), the same application in Kafka Streams
(kafka-streams/, Processor API, the same two RocksDB stores logged to changelog topics), the same
count in Quix Streams (one store), and a bare librdkafka consumer that reads the topic and does
nothing (bare-consumer/: the limit of any consumer-based application). Run by run.sh.

Parts (--parts):
  throughput  each variant (application x processing guarantee x processing threads) reads the
              input from the start under a fresh application id: records/s from its first
              record to its group's committed offsets reaching the end of the input (the bare
              consumer: to its last record), and its CPU, the broker's CPU and its peak RSS
  restart     then, on its kept state with new records waiting: start to first record after a
              clean stop, and after a kill -9 (a static member, so that the group does not
              wait for the killed member's session to end)
  restore     statestore and Kafka Streams (one static member) count --keys distinct keys,
              stop; start on the kept state (R), then on an emptied state directory (E), each
              time to the first record of every task; restore rate = changelog records / (E - R)
              (--restore-repeats N: N pairs of restarts, the one with the median E - R).
              Both replay their changelogs; statestore runs a second time with snapshots
              (--restore-snapshots, a path Kafka Streams lacks): every commit snapshots each
              store's RocksDB files into a file:// object store in the run's work dir, and E
              downloads the newest snapshots, then replays only the changelog after them
  rekey       statestore (`run --rekey`) and Kafka Streams (RekeyedWordCount, its DSL:
              flatMapValues, groupBy, count) count the same words from lines without a key,
              re-keyed through the repartition topic <application>-words-by-word-repartition,
              each count sent to an output topic: records/s (words) from the first line to
              the group's committed offsets reaching the end of the input and of the
              repartition topic, CPU per word, broker CPU per word, peak RSS; beside the
              throughput part's one-sub-topology count when both run
  failover    statestore and Kafka Streams, two instances (session timeout 10 s) share
              --failover-keys keys; one is killed with kill -9: time from the kill to the
              survivor's first record on the last of the victim's tasks, with 0 and 1 standby
              replicas (the approach of examples/partitioned-wordcount/figures.sh);
              --failover-repeats N runs each N times, the systems alternating, and reports
              the median and the range

Writes results.json, results.md and a chart (results.png, results.svg) to --out, and progress
lines to stderr.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

TICKS = os.sysconf("SC_CLK_TCK")
# The words of each line `partitioned-wordcount produce` writes.
WORDS_PER_LINE = 8
STARTED = time.time()
GUARANTEE_SHORT = {"at_least_once": "ALOS", "exactly_once_v2": "EOS-v2"}


def progress(text: str) -> None:
    elapsed = int(time.time() - STARTED)
    print(f"[{elapsed // 60:3d}:{elapsed % 60:02d}] {text}", file=sys.stderr, flush=True)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of process `pid` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Kafka:
    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap})
        self.consumers: dict[str, Consumer] = {}
        self.known: dict[str, list[int]] = {}

    def consumer(self, group: str) -> Consumer:
        """One consumer per group, kept: a new client per check would cost the broker more."""
        if group not in self.consumers:
            self.consumers[group] = Consumer({"bootstrap.servers": self.bootstrap,
                                              "group.id": group, "enable.auto.commit": False})
        return self.consumers[group]

    def topics(self) -> set[str]:
        return set(self.admin.list_topics(timeout=10).topics)

    def partitions(self, topic: str) -> list[int]:
        if topic not in self.known:
            meta = self.admin.list_topics(topic, timeout=10)
            self.known[topic] = sorted(meta.topics[topic].partitions)
        return self.known[topic]

    def offsets(self, topic: str) -> list[tuple[int, int]]:
        """(low, high) watermarks of every partition."""
        consumer = self.consumer("peers-watermarks")
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                for p in self.partitions(topic)]

    def records(self, topic: str) -> int:
        return sum(high - low for low, high in self.offsets(topic))

    def lag(self, group: str, topic: str) -> int:
        """Records of `topic` past `group`'s committed offsets."""
        consumer = self.consumer(group)
        parts = [TopicPartition(topic, p) for p in self.partitions(topic)]
        committed = consumer.committed(parts, timeout=10)
        ends = [consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] for tp in parts]
        return sum(end - max(c.offset, 0) for c, end in zip(committed, ends))

    def changelog_topics(self, application: str) -> list[str]:
        """The changelog topics of `application` (`<application>-<store>-changelog`)."""
        return sorted(t for t in self.admin.list_topics(timeout=10).topics
                      if t.startswith(application + "-") and t.endswith("-changelog"))

    def changelog_records(self, application: str) -> int:
        return sum(self.records(name) for name in self.changelog_topics(application))

    def close(self) -> None:
        for consumer in self.consumers.values():
            consumer.close()


FIRST_OF_TASK = re.compile(r"^first record of (\S+) at (\d+) ms")
PROCESSED = re.compile(r"^processed (\d+) tasks \[(.*?)\] standby \[(.*?)\]")
# statestore's `assigned 0_1 at offset ... (restored counts: 250000 records from 0, letters: ...`
RESTORED = re.compile(r"(\d+) records from \d+")
# A snapshot's manifest: `<offset, 20 digits>-<epoch, 20 digits>.ckpt`.
MANIFEST = re.compile(r"^(\d{20})-(\d{20})\.ckpt$")


def task_names(listed: str) -> set[str]:
    """Task ids from a `processed` line: `0_1, 0_2` (Kafka Streams) or statestore's
    `TaskId { subtopology: 0, partition: 1 }, ...`."""
    debug = re.findall(r"subtopology: (\d+), partition: (\d+)", listed)
    if debug:
        return {f"{s}_{p}" for s, p in debug}
    return set(re.findall(r"\d+_\d+", listed))


class Instance:
    """One process of an application, its stderr watched: its first record (sampled: time,
    its CPU, the broker's CPU), the first record of each task, its last `processed` line, and
    for the bare consumer its `done` line (sampled too)."""

    def __init__(self, command: list[str], first_marker: str, broker_pid: int | None,
                 stop_with_sigterm: bool = False, done_marker: str | None = None):
        self.stop_with_sigterm = stop_with_sigterm
        self.broker_pid = broker_pid
        self.started = now_ms()
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True)
        self.first: dict | None = None
        self.done: dict | None = None
        self.log: list[str] = []
        self.tasks_first: list[tuple[int, str, int]] = []
        self.active: set[str] = set()
        self.standby: set[str] = set()

        def watch():
            for line in self.process.stderr:
                line = line.rstrip()
                self.log.append(line)
                if self.first is None and first_marker in line:
                    self.first = self.sample()
                if done_marker and self.done is None and line.startswith(done_marker):
                    self.done = self.sample()
                if match := FIRST_OF_TASK.match(line):
                    self.tasks_first.append((len(self.log), match[1], int(match[2])))
                elif match := PROCESSED.match(line):
                    self.active, self.standby = task_names(match[2]), task_names(match[3])

        threading.Thread(target=watch, daemon=True).start()

    def sample(self) -> dict:
        return {"ms": now_ms(), "cpu": cpu_seconds(self.process.pid),
                "rss_mib": peak_rss_mib(self.process.pid),
                "broker_cpu": cpu_seconds(self.broker_pid) if self.broker_pid else None}

    def check(self, what: str) -> None:
        if self.process.poll() is not None:
            raise SystemExit(f"exited while {what}:\n" + "\n".join(self.log[-20:]))

    def wait(self, what: str, done, timeout: float, every: float = 0.02):
        """Polls `done()` every `every` seconds until it returns something true."""
        deadline = time.time() + timeout
        while True:
            value = done()
            if value:
                return value
            self.check(what)
            if time.time() > deadline:
                raise SystemExit(f"timed out {what}:\n" + "\n".join(self.log[-20:]))
            time.sleep(every)

    def wait_first(self, timeout: float) -> dict:
        return self.wait("waiting for its first record", lambda: self.first, timeout)

    def wait_tasks_first(self, tasks: set[str], after_line: int, timeout: float) -> int:
        """The time of the last of `tasks` to process its first record after log line
        `after_line`."""
        def last():
            seen = {task: at for line, task, at in self.tasks_first if line > after_line}
            return max(seen[t] for t in tasks) if tasks <= seen.keys() else None
        return self.wait(f"waiting for the first record of {sorted(tasks)}", last, timeout)

    def stop(self) -> None:
        """Stops cleanly: SIGTERM for Quix, stdin closed for the others."""
        if self.process.poll() is None:
            if self.stop_with_sigterm:
                self.process.send_signal(signal.SIGTERM)
            else:
                self.process.stdin.close()
        self.process.wait(timeout=180)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


class Harness:
    def __init__(self, args):
        self.args = args
        self.kafka = Kafka(args.bootstrap)
        self.run = f"{os.getpid()}-{int(time.time())}"
        self.work = Path(args.out) / "state"
        self.instances: list[Instance] = []

    # --- input ---------------------------------------------------------------------------

    def produce(self, topic: str, start: int, end: int, distinct_keys: bool = False,
                unkeyed: bool = False) -> None:
        subprocess.run([self.args.wordcount, "produce", "--bootstrap", self.args.bootstrap,
                        "--topic", topic, "--from", str(start), "--lines", str(end)]
                       + (["--distinct-keys"] if distinct_keys else [])
                       + (["--unkeyed-lines"] if unkeyed else []),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    # --- the applications ----------------------------------------------------------------

    def start(self, system: str, topic: str, app: str, state: Path, guarantee="at_least_once",
              threads=1, standbys=0, static: str | None = None, sets=(),
              rekey_output: str | None = None) -> Instance:
        """One instance of `system`: statestore, kafka-streams, quix or bare (`sets`: more
        options of statestore's or of the bare consumer's, such as `--set NAME=VALUE`); with
        `rekey_output`, statestore's or Kafka Streams' re-keyed count, writing there."""
        a = self.args
        common = ["--bootstrap", a.bootstrap, "--topic", topic, "--application-id", app,
                  "--state-dir", str(state), "--stop-on-stdin-eof",
                  "--processing-guarantee", guarantee, "--threads", str(threads),
                  "--num-standby-replicas", str(standbys),
                  "--session-timeout-ms", str(a.session_timeout_ms), "--commit-interval-ms", "1000"]
        if static:
            common += ["--group-instance-id", static]
        if rekey_output:
            common += ["--output-topic", rekey_output]
            if system == "statestore":
                common += ["--rekey"]
        if system == "statestore":
            instance = Instance([a.wordcount, "run", "--assignment-strategy",
                                 a.assignment_strategy, *common, *sets], "first record of",
                                a.broker_pid)
        elif system == "kafka-streams":
            main = "RekeyedWordCount" if rekey_output else "WordCount"
            instance = Instance([a.java, *a.java_opts.split(), "-cp", a.ks_classpath,
                                 f"statestore.peers.{main}"] + common,
                                "first record of", a.broker_pid)
        elif system == "quix":
            quix = Path(__file__).with_name("quix_wordcount.py")
            instance = Instance([sys.executable, str(quix), "--bootstrap", a.bootstrap,
                                 "--topic", topic, "--group", app, "--state-dir", str(state)],
                                "first record at", a.broker_pid, stop_with_sigterm=True)
        elif system == "bare":
            instance = Instance([a.bare_consumer, "--bootstrap", a.bootstrap, "--topic", topic,
                                 "--stop-on-stdin-eof", *sets], "first record at",
                                a.broker_pid, done_marker="done ")
        else:
            raise SystemExit(f"unknown system {system}")
        self.instances.append(instance)
        return instance

    def kill_all(self) -> None:
        for instance in self.instances:
            if instance.process.poll() is None:
                instance.kill()

    def app_id(self, name: str) -> str:
        return f"peers-{name}-{self.run}"

    # --- the parts -----------------------------------------------------------------------

    def throughput(self, variant: dict, topic: str, lines: list[int]) -> dict:
        """Reads `topic` from the start; then the restarts on the kept state."""
        a, kafka = self.args, self.kafka
        system, name = variant["system"], variant["name"]
        app = self.app_id(variant["key"])
        state = self.work / app
        records = kafka.records(topic)
        progress(f"{name}: processing {records:,} records")
        opts = {k: variant[k] for k in ("guarantee", "threads", "sets") if k in variant}
        static = f"{app}-1" if system in ("statestore", "kafka-streams") else None
        instance = self.start(system, topic, app, state, static=static, **opts)
        first = instance.wait_first(300)
        if system == "bare":
            done = instance.wait("reading to the end", lambda: instance.done, 1800)
        else:
            instance.wait("processing the input",
                          lambda: kafka.lag(app, topic) == 0, 3600, every=0.1)
            done = instance.sample()
        instance.stop()
        result = self.rates(first, done, records)
        progress(f"{name}: {result['records_per_s']:,.0f} records/s, "
                 f"{result['instance_cpu_us_per_record']:.2f} µs CPU per record, "
                 f"peak RSS {result['peak_rss_mib']:.0f} MiB")
        if "restart" in a.parts and system != "bare":
            extra = max(a.lines // 100, 100)

            def more():
                self.produce(topic, lines[0], lines[0] + extra)
                lines[0] += extra

            more()
            instance = self.start(system, topic, app, state, static=static, **opts)
            result["restart_s"] = (instance.wait_first(600)["ms"] - instance.started) / 1000
            if static:
                # Killed once the restart has committed: its state is kept, its commit is not.
                time.sleep(2)
                instance.kill()
                more()
                instance = self.start(system, topic, app, state, static=static, **opts)
                result["restart_after_kill_s"] = \
                    (instance.wait_first(600)["ms"] - instance.started) / 1000
            instance.stop()
            progress(f"{name}: restart to first record {result['restart_s']:.2f} s"
                     + (f", after kill -9 {result['restart_after_kill_s']:.2f} s"
                        if "restart_after_kill_s" in result else ""))
        shutil.rmtree(state, ignore_errors=True)
        return result

    def rates(self, first: dict, end: dict, records: int) -> dict:
        """Records/s, the instance's and the broker's CPU per record and the peak RSS between
        two samples of an instance."""
        seconds = (end["ms"] - first["ms"]) / 1000
        return {
            "records": records,
            "records_per_s": records / max(seconds, 1e-3),
            "instance_cpu_us_per_record": (end["cpu"] - first["cpu"]) * 1e6 / records,
            "broker_cpu_us_per_record": ((end["broker_cpu"] - first["broker_cpu"]) * 1e6 / records
                                         if self.args.broker_pid else None),
            "peak_rss_mib": end["rss_mib"],
        }

    def rekey(self, variant: dict, topic: str) -> dict:
        """Counts the words of the unkeyed lines of `topic` from the start, re-keyed."""
        kafka = self.kafka
        system, name = variant["system"], variant["name"]
        app = self.app_id(variant["key"])
        state, output = self.work / app, f"{app}-out"
        repartition = f"{app}-words-by-word-repartition"
        self.produce(output, 0, 0)
        words = kafka.records(topic) * WORDS_PER_LINE
        progress(f"{name}: counting {words:,} words")
        instance = self.start(system, topic, app, state, guarantee=variant["guarantee"],
                              threads=variant["threads"], rekey_output=output)
        first = instance.wait_first(300)
        partitions = len(kafka.partitions(topic))

        def done() -> bool:
            # Under exactly-once a transaction's marker may follow a partition's last
            # repartition record, past the committed offset: one per partition is allowed.
            return (kafka.lag(app, topic) == 0 and repartition in kafka.topics()
                    and kafka.lag(app, repartition) <= partitions)

        instance.wait("processing the words", done, 3600, every=0.1)
        end = instance.sample()
        instance.stop()
        shutil.rmtree(state, ignore_errors=True)
        result = {**self.rates(first, end, words), "outputs": kafka.records(output)}
        progress(f"{name}: {result['records_per_s']:,.0f} words/s, "
                 f"{result['instance_cpu_us_per_record']:.2f} µs CPU per word, "
                 f"{result['outputs']:,} output offsets")
        return result

    def restore(self, system: str, topic: str, keys: list[int], snapshots=False) -> dict:
        """Counts the keys of `topic`, then the restart on the kept state and on an emptied
        state directory, each to the first record of every task. With `snapshots`
        (statestore): every commit of the counting and of the restarts snapshots each store
        into a file:// object store beside the state, and the emptied directory starts from
        the newest snapshots."""
        kafka = self.kafka
        name = f"{system}-snapshot" if snapshots else system
        app = self.app_id(f"restore-{name}")
        state = self.work / app
        objects = (self.work / f"{app}-snapshots").resolve()
        # Every commit that wrote snapshots: the counting's last commit is in one whatever
        # its timing.
        sets = (["--snapshot-url", f"file://{objects}", "--snapshot-every-commits", "1"]
                if snapshots else [])
        tasks = {f"0_{p}" for p in kafka.partitions(topic)}
        progress(f"restore {name}: counting {kafka.records(topic):,} distinct keys")
        # A static member: a restart does not wait for the previous member's session to end
        # (Kafka Streams does not leave the group when it closes).
        static = f"{app}-1"
        instance = self.start(system, topic, app, state, static=static, sets=sets)
        instance.wait("counting the keys", lambda: kafka.lag(app, topic) == 0, 3600, every=0.1)
        if snapshots:
            instance.wait("snapshotting every store", lambda: self.snapshotted(app, objects),
                          600, every=0.2)
        instance.stop()

        def restart() -> tuple[float, int | None, list[str]]:
            """Seconds to the first record of every task, the changelog records the stores
            replayed (statestore's `assigned` lines), and the lines of the start, the
            assignments and the first records, stamped with the ms since the start."""
            self.produce(topic, keys[0], keys[0] + 64, distinct_keys=True)
            keys[0] += 64
            instance = self.start(system, topic, app, state, static=static, sets=sets)
            last = instance.wait_tasks_first(tasks, 0, 1800)
            instance.stop()
            replayed = None
            if system == "statestore":
                replayed = sum(int(n) for line in instance.log if line.startswith("assigned ")
                               for n in RESTORED.findall(line))
            stamped = [re.sub(r"at (\d{13}) ms",
                              lambda m: f"at +{int(m[1]) - instance.started} ms", line)
                       for line in instance.log
                       if line.startswith(("started", "assigned", "first record", "restor"))]
            return (last - instance.started) / 1000, replayed, stamped

        kept_all, empty_all = [], []
        for repeat in range(self.args.restore_repeats):
            kept, _, kept_log = restart()
            kept_all.append(kept)
            shutil.rmtree(state)
            changelog = kafka.changelog_records(app)
            snapshot_bytes = self.snapshot_bytes(objects) if snapshots else None
            progress(f"restore {name}: restart on kept state {kept:.2f} s; restoring "
                     + (f"the newest snapshots ({snapshot_bytes / 2**20:,.1f} MiB) and the "
                        "changelog after them" if snapshots else f"{changelog:,} changelog records")
                     + " into an empty state directory")
            empty, replayed, empty_log = restart()
            empty_all.append(empty)
            progress(f"restore {name}: {empty:.2f} s to first record on every task")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(objects, ignore_errors=True)
        # One pair of restarts by default; with --restore-repeats the pair whose difference is
        # the median (each pair ran back to back, under the same load).
        kept, empty = median_pair(kept_all, empty_all)
        restore_s = max(empty - kept, 0.001)
        result = {"changelog_records": changelog, "restart_kept_s": kept,
                  "restart_empty_s": empty, "restore_s": restore_s,
                  "restore_records_per_s": changelog / restore_s,
                  "restart_kept_all_s": kept_all, "restart_empty_all_s": empty_all,
                  "replayed_records": replayed, "snapshot_bytes": snapshot_bytes,
                  "kept_log": kept_log, "empty_log": empty_log}
        progress(f"restore {name}: restore {restore_s:.2f} s (kept {kept:.2f} s, empty "
                 f"{empty:.2f} s), {result['restore_records_per_s']:,.0f} changelog records/s"
                 + (f", {replayed:,} replayed" if replayed is not None else ""))
        if snapshots and replayed > changelog // 2:
            progress(f"restore {name}: WARNING: {replayed:,} of {changelog:,} changelog records "
                     "were replayed: the snapshots were not used (see the instance's log)")
        return result

    def snapshotted(self, app: str, objects: Path) -> bool:
        """Whether every changelog partition of `app` has a snapshot at its last record (the
        marker of its last commit)."""
        topics = self.kafka.changelog_topics(app)
        if not topics:
            return False
        for topic in topics:
            for partition, (_, high) in zip(self.kafka.partitions(topic),
                                            self.kafka.offsets(topic)):
                newest = max((int(m[1]) for f in (objects / topic / str(partition)).glob("*.ckpt")
                              if (m := MANIFEST.match(f.name))), default=-1)
                if newest < high - 1:
                    return False
        return True

    @staticmethod
    def snapshot_bytes(objects: Path) -> int:
        """The bytes of the newest snapshot of every changelog partition: the files its
        manifest names, which sit in `<manifest stem>.files/`."""
        total = 0
        for partition in objects.glob("*/*"):
            manifests = sorted(f for f in partition.glob("*.ckpt") if MANIFEST.match(f.name))
            if manifests:
                files = manifests[-1].with_name(manifests[-1].stem + ".files")
                total += sum(f.stat().st_size for f in files.rglob("*") if f.is_file())
        return total

    def failover(self, system: str, standbys: int, repeat: int = 0) -> dict:
        """Two instances share the keys; the victim is killed; time from the kill to the
        survivor's first record on the last of the victim's tasks (`repeat`: which of the
        --failover-repeats runs, each its own application and topic)."""
        a, kafka = self.args, self.kafka
        app = self.app_id(f"failover-{system}-{standbys}" + (f"-r{repeat}" if repeat else ""))
        topic = f"{app}-keys"
        self.produce(topic, 0, 0, distinct_keys=True)
        progress(f"failover {system}, {standbys} standby: two instances, {a.failover_keys:,} keys")
        survivor = self.start(system, topic, app, self.work / f"{app}-survivor", standbys=standbys)
        survivor.wait("joining", lambda: len(survivor.active) == len(kafka.partitions(topic)), 300)
        victim = self.start(system, topic, app, self.work / f"{app}-victim", standbys=standbys)
        victim.wait("sharing the tasks", lambda: bool(victim.active and survivor.active
                                                      and not victim.active & survivor.active),
                    300)
        self.produce(topic, 0, a.failover_keys, distinct_keys=True)
        survivor.wait("counting the keys", lambda: kafka.lag(app, topic) == 0, 3600, every=0.1)
        tasks = set(victim.active)
        if standbys:
            survivor.wait("placing standbys", lambda: tasks <= survivor.standby, 300)
        # A commit every second, and a standby that catches up every second.
        time.sleep(3)
        before = len(survivor.log)
        killed = now_ms()
        victim.kill()
        self.produce(topic, a.failover_keys, a.failover_keys + 64, distinct_keys=True)
        last = survivor.wait_tasks_first(tasks, before, 900)
        survivor.stop()
        for side in ("survivor", "victim"):
            shutil.rmtree(self.work / f"{app}-{side}", ignore_errors=True)
        # The survivor's lines from the kill on (its assignments, with their restore times,
        # and first records, each stamped in ms): where the failover's seconds went.
        result = {"failover_s": (last - killed) / 1000, "victim_tasks": sorted(tasks),
                  "killed_ms": killed, "survivor_log": survivor.log[before:]}
        progress(f"failover {system}, {standbys} standby: {result['failover_s']:.2f} s "
                 f"(victim's tasks {sorted(tasks)})")
        return result


def median_pair(kept: list[float], empty: list[float]) -> tuple[float, float]:
    """The (kept, empty) pair whose difference is the median one (the lower middle one of
    an even number)."""
    pairs = sorted(zip(kept, empty), key=lambda pair: pair[1] - pair[0])
    return pairs[(len(pairs) - 1) // 2]


def variants(args) -> list[dict]:
    """The throughput variants selected by --systems, --guarantees and --thread-counts."""
    out = []
    for system in args.systems:
        if system in ("statestore", "kafka-streams"):
            label = "statestore" if system == "statestore" else "Kafka Streams"
            for guarantee in args.guarantees:
                for threads in args.thread_counts:
                    out.append({"system": system, "guarantee": guarantee, "threads": threads,
                                "key": f"{system}-{guarantee}-{threads}",
                                "name": f"{label} {GUARANTEE_SHORT[guarantee]}, {threads} "
                                        f"thread{'s' if threads > 1 else ''}"})
        elif system == "quix":
            out.append({"system": "quix", "key": "quix",
                        "name": "Quix Streams ALOS, 1 thread"})
        elif system == "bare":
            # librdkafka's defaults, whose fetch.queue.backoff.ms (1 s) pauses the fetches of a
            # consumer that drains 100 000 queued records faster than that, and 10 ms.
            out.append({"system": "bare", "key": "bare", "name": "bare librdkafka consumer"})
            out.append({"system": "bare", "key": "bare-backoff10",
                        "sets": ["--set", "fetch.queue.backoff.ms=10"],
                        "name": "bare consumer, fetch.queue.backoff.ms=10"})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--wordcount", required=True, help="the partitioned-wordcount binary")
    parser.add_argument("--bare-consumer", help="the peers-bare-consumer binary")
    parser.add_argument("--ks-classpath", help="class path of the Kafka Streams word count")
    parser.add_argument("--java", default="java")
    parser.add_argument("--java-opts", default="", help="JVM options of Kafka Streams")
    parser.add_argument("--lines", type=int, default=300000,
                        help="input lines of 8 words (records) each (default 300000: 2.4M records)")
    parser.add_argument("--keys", type=int, default=1_000_000,
                        help="distinct keys of the restore part")
    parser.add_argument("--restore-snapshots", action=argparse.BooleanOptionalAction,
                        default=True,
                        help="restore statestore a second time from snapshots (default: on)")
    parser.add_argument("--restore-repeats", type=int, default=1,
                        help="restarts on kept state and on an empty state directory, each "
                             "this many times, alternately; the pair with the median "
                             "difference is reported")
    parser.add_argument("--failover-keys", type=int,
                        help="distinct keys of the failover part (default --keys)")
    parser.add_argument("--systems", default="statestore,kafka-streams,quix,bare",
                        type=lambda s: s.split(","))
    parser.add_argument("--guarantees", default="at_least_once,exactly_once_v2",
                        type=lambda s: s.split(","))
    parser.add_argument("--thread-counts", default="1,2",
                        type=lambda s: [int(n) for n in s.split(",")])
    parser.add_argument("--parts", default="throughput,restart,restore,failover",
                        type=lambda s: s.split(","))
    parser.add_argument("--standbys", default="0,1", type=lambda s: [int(n) for n in s.split(",")])
    parser.add_argument("--failover-repeats", type=int, default=1,
                        help="failover runs per system x standby count, the systems alternating "
                             "(the table shows their median and range)")
    parser.add_argument("--session-timeout-ms", type=int, default=10000)
    parser.add_argument("--assignment-strategy", default="range",
                        choices=["range", "roundrobin", "cooperative-sticky"],
                        help="statestore's (Kafka Streams' protocol is cooperative)")
    parser.add_argument("--broker-pid", type=int)
    parser.add_argument("--out", required=True)
    parser.add_argument("--threads-work-us", type=float, default=0,
                        help="also run statestore alone with 1 and 2 processing threads, each "
                             "record given this much busy CPU work (microseconds)")
    parser.add_argument("--threads-only", action="store_true",
                        help="only the threads run (needs --threads-work-us)")
    args = parser.parse_args()
    args.failover_keys = args.failover_keys or args.keys
    if args.failover_repeats < 1:
        parser.error("--failover-repeats must be at least 1")
    for guarantee in args.guarantees:
        if guarantee not in GUARANTEE_SHORT:
            parser.error(f"unknown guarantee {guarantee}")
    for part in args.parts:
        if part not in ("throughput", "restart", "rekey", "restore", "failover"):
            parser.error(f"unknown part {part}")
    if args.restore_repeats < 1:
        parser.error("--restore-repeats must be at least 1")
    if "kafka-streams" in args.systems and not args.ks_classpath:
        parser.error("kafka-streams needs --ks-classpath")
    if "bare" in args.systems and not args.bare_consumer:
        parser.error("bare needs --bare-consumer")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    harness = Harness(args)
    try:
        if args.threads_work_us > 0:
            threads_run(args, harness)
            if args.threads_only:
                return
        results = measure(args, harness)
    finally:
        harness.kill_all()
        harness.kafka.close()
        shutil.rmtree(harness.work, ignore_errors=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    table = render(results)
    (out / "results.md").write_text(table)
    print(table)
    chart(results, out / "results.png")
    progress(f"done: {out / 'results.md'}, {out / 'results.png'}, {out / 'results.svg'}")


def measure(args, harness: Harness) -> dict:
    results = {"date": time.strftime("%Y-%m-%d %H:%M %Z"),
               "load_average_at_start": os.getloadavg()[0], "cpus": os.cpu_count(),
               "lines": args.lines, "keys": args.keys, "failover_keys": args.failover_keys,
               "session_timeout_ms": args.session_timeout_ms,
               "failover_repeats": args.failover_repeats,
               "throughput": {}, "rekey": {}, "restore": {}, "failover": {}}
    if "throughput" in args.parts:
        topic = f"peers-words-{harness.run}"
        progress(f"producing {args.lines:,} lines to {topic}")
        harness.produce(topic, 0, args.lines)
        lines = [args.lines]
        for variant in variants(args):
            results["throughput"][variant["key"]] = {
                "name": variant["name"], **harness.throughput(variant, topic, lines)}
    pair = [s for s in ("statestore", "kafka-streams") if s in args.systems]
    if "rekey" in args.parts and pair:
        topic = f"peers-lines-{harness.run}"
        progress(f"producing {args.lines:,} unkeyed lines to {topic}")
        harness.produce(topic, 0, args.lines, unkeyed=True)
        for variant in variants(args):
            if variant["system"] in pair:
                key = f"rekey-{variant['key']}"
                results["rekey"][key] = {
                    "name": f"{variant['name']}, re-keyed",
                    **harness.rekey({**variant, "key": key}, topic)}
    if "restore" in args.parts and pair:
        topic = f"peers-keys-{harness.run}"
        progress(f"producing {args.keys:,} distinct keys to {topic}")
        harness.produce(topic, 0, args.keys, distinct_keys=True)
        keys = [args.keys]
        for system in pair:
            results["restore"][system] = harness.restore(system, topic, keys)
            if system == "statestore" and args.restore_snapshots:
                results["restore"]["statestore-snapshot"] = \
                    harness.restore(system, topic, keys, snapshots=True)
    if "failover" in args.parts:
        # The repeats alternate the systems, so that a slow stretch of the machine falls on
        # both; each system x standby reports the median of its runs and their range.
        runs: dict[str, list[dict]] = {}
        for standbys in args.standbys:
            for repeat in range(args.failover_repeats):
                for system in pair:
                    runs.setdefault(f"{system}-{standbys}", []).append(
                        harness.failover(system, standbys, repeat))
        for key, done in runs.items():
            seconds = sorted(run["failover_s"] for run in done)
            system, standbys = key.rsplit("-", 1)
            results["failover"][key] = {
                "system": system, "standbys": int(standbys), "failover_s": median(seconds),
                "min_s": seconds[0], "max_s": seconds[-1], "runs": done}
    results["load_average_at_end"] = os.getloadavg()[0]
    return results


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


LABELS = {"statestore": "statestore", "kafka-streams": "Kafka Streams",
          "statestore-snapshot": "statestore, snapshot bootstrap"}
CHART_LABELS = {"statestore-snapshot": "statestore, snapshot\nbootstrap (Kafka\nStreams has none)"}


def fmt(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def render(results: dict) -> str:
    lines = [f"{results['date']}, {results['cpus']} CPUs, load average "
             f"{results['load_average_at_start']:.2f} at the start, "
             f"{results['load_average_at_end']:.2f} at the end", ""]
    if results["throughput"]:
        first = next(iter(results["throughput"].values()))
        lines += [f"Throughput: {first['records']:,} records ({results['lines']:,} lines of 8 "
                  "words), one instance at a time, from the start of the topic, commit every 1 s",
                  "",
                  "| | records/s | instance CPU per record (µs) | broker CPU per record (µs) "
                  "| peak RSS (MiB) | restart to first record (s) | after kill -9 (s) |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for row in results["throughput"].values():
            lines.append(
                f"| {row['name']} | {fmt(row['records_per_s'], '{:,.0f}')} "
                f"| {fmt(row['instance_cpu_us_per_record'], '{:.2f}')} "
                f"| {fmt(row['broker_cpu_us_per_record'], '{:.2f}')} "
                f"| {fmt(row['peak_rss_mib'], '{:.0f}')} "
                f"| {fmt(row.get('restart_s'), '{:.2f}')} "
                f"| {fmt(row.get('restart_after_kill_s'), '{:.2f}')} |")
        lines.append("")
    if results.get("rekey"):
        first = next(iter(results["rekey"].values()))
        lines += [f"Re-keyed count: {first['records']:,} words in {results['lines']:,} lines "
                  "without a key, split, re-keyed through a repartition topic and counted, "
                  "each count sent to an output topic; one instance, commit every 1 s "
                  "(Kafka Streams' DSL count caches, so it sends fewer counts)", "",
                  "| | words/s | instance CPU per word (µs) | broker CPU per word (µs) "
                  "| peak RSS (MiB) | output offsets |", "|---|---:|---:|---:|---:|---:|"]
        for row in results["rekey"].values():
            lines.append(
                f"| {row['name']} | {row['records_per_s']:,.0f} "
                f"| {row['instance_cpu_us_per_record']:.2f} "
                f"| {fmt(row['broker_cpu_us_per_record'], '{:.2f}')} "
                f"| {row['peak_rss_mib']:.0f} | {row['outputs']:,} |")
        lines.append("")
    if results["restore"]:
        repeats = len(next(iter(results["restore"].values())).get("restart_kept_all_s", [0]))
        lines += [f"Restore from an empty state directory: {results['keys']:,} distinct keys, "
                  "one instance, 4 tasks, to the first record of every task"
                  + (f"; of {repeats} pairs of restarts, the one with the median restore"
                     if repeats > 1 else ""), "",
                  "| | changelog records | restart on kept state (s) | on an empty state dir (s) "
                  "| restore (s) | restore rate (records/s) |", "|---|---:|---:|---:|---:|---:|"]
        for system, row in results["restore"].items():
            # A snapshot bootstrap replays (almost) nothing: no rate of replay.
            rate = ("-" if system == "statestore-snapshot"
                    else f"{row['restore_records_per_s']:,.0f}")
            lines.append(f"| {LABELS[system]} | {row['changelog_records']:,} "
                         f"| {row['restart_kept_s']:.2f} | {row['restart_empty_s']:.2f} "
                         f"| {row['restore_s']:.2f} | {rate} |")
        lines.append("")
        if snapshot := results["restore"].get("statestore-snapshot"):
            lines += [f"statestore, snapshot bootstrap: Kafka Streams has no such path (it "
                      f"replays its changelogs). Every commit snapshotted each store's RocksDB "
                      f"files into a file:// object store; the empty state directory downloaded "
                      f"the newest ({snapshot['snapshot_bytes'] / 2**20:,.1f} MiB) and replayed "
                      f"{snapshot['replayed_records']:,} changelog records after them. Its restore "
                      f"is what the download adds to a restart on kept state: a difference of "
                      f"two restarts, coarse when it is small (every restart's time is in "
                      f"results.json).", ""]
    if results["failover"]:
        lines += [f"Failover: two instances, {results['failover_keys']:,} distinct keys, session "
                  f"timeout {results['session_timeout_ms'] / 1000:g} s; kill -9 of one to the "
                  "survivor's first record on the last of its tasks; the median of "
                  f"{results.get('failover_repeats', 1)} run(s) and their range", "",
                  "| | standby replicas | failover (s), median | min - max (s) |",
                  "|---|---:|---:|---:|"]
        for row in results["failover"].values():
            lines.append(f"| {LABELS[row['system']]} | {row['standbys']} "
                         f"| {row['failover_s']:.2f} "
                         f"| {fmt(row.get('min_s'), '{:.2f}')} - "
                         f"{fmt(row.get('max_s'), '{:.2f}')} |")
        lines.append("")
    return "\n".join(lines)


def chart(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"statestore": "#2a6f97", "kafka-streams": "#c8553d", "quix": "#8a6fb0",
              "bare": "#7f7f7f", "statestore-snapshot": "#89c2d9"}
    panels = []
    rows = results["throughput"]
    names = [row["name"] for row in rows.values()]
    bar_colors = [colors[key.split("-")[0] if not key.startswith("kafka") else "kafka-streams"]
                  for key in rows]
    if results.get("rekey"):
        rows = {**rows, **results["rekey"]}
        names = [row["name"] for row in rows.values()]
        systems = [key.removeprefix("rekey-") for key in rows]
        bar_colors = [colors["kafka-streams" if system.startswith("kafka") else
                             system.split("-")[0]] for system in systems]
    for key, label in [("records_per_s", "records/s"),
                       ("instance_cpu_us_per_record", "instance CPU per record (µs)"),
                       ("broker_cpu_us_per_record", "broker CPU per record (µs)"),
                       ("peak_rss_mib", "peak RSS (MiB)")]:
        if rows:
            panels.append((label, names, [row.get(key) or 0 for row in rows.values()],
                           bar_colors))
    if results["restore"]:
        panels.append((f"restore of {results['keys']:,} keys (s)",
                       [CHART_LABELS.get(s, LABELS[s]) for s in results["restore"]],
                       [r["restore_s"] for r in results["restore"].values()],
                       [colors[s] for s in results["restore"]]))
    if results["failover"]:
        panels.append(("failover (s)",
                       [f"{LABELS[r['system']]}, {r['standbys']} standby"
                        for r in results["failover"].values()],
                       [r["failover_s"] for r in results["failover"].values()],
                       [colors[r["system"]] for r in results["failover"].values()]))
    if not panels:
        return
    columns = min(3, len(panels))
    rows_n = (len(panels) + columns - 1) // columns
    figure, axes = plt.subplots(rows_n, columns, figsize=(6 * columns, 4.2 * rows_n),
                                squeeze=False)
    for axis, (label, labels, values, cols) in zip(axes.flat, panels):
        axis.barh(labels, values, color=cols)
        axis.invert_yaxis()
        axis.set_title(label, fontsize=10)
        axis.tick_params(axis="y", labelsize=8)
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    # Wrapped to the figure's width (about 11 characters an inch at this size).
    figure.suptitle(textwrap.fill(f"statestore, Kafka Streams 4.4, Quix Streams and a bare "
                                  f"consumer on one Apache Kafka broker, {results['date']}, "
                                  f"load average {results['load_average_at_start']:.1f}",
                                  width=11 * 6 * columns), fontsize=11)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    # Text kept as text: a small file for docs/.
    matplotlib.rcParams["svg.fonttype"] = "none"
    figure.savefig(path.with_suffix(".svg"))


# --- processing threads under CPU-heavy records (statestore alone) ----------------------------


def threads_run(args, harness: Harness) -> None:
    kafka = harness.kafka
    topic = f"peers-words-{harness.run}-threads"
    harness.produce(topic, 0, args.lines)
    records = kafka.records(topic)
    # The same number of records with distinct keys: partitions of equal size, where the
    # words' skew makes one task (processed by one thread at a time) the longest.
    keyed = f"peers-keys-{harness.run}-threads"
    harness.produce(keyed, 0, records, distinct_keys=True)
    scaling = {"words": threads_scaling(args, kafka, topic, records, harness.run),
               "distinct_keys": threads_scaling(args, kafka, keyed, records,
                                                harness.run + "-keys")}
    out = Path(args.out)
    (out / "threads.json").write_text(json.dumps(scaling, indent=2))
    print(render_threads(scaling))
    (out / "threads.md").write_text(render_threads(scaling))


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
                            "first record of", args.broker_pid)
        first = instance.wait_first(120)
        # Checked twice a second: each check costs CPU the threads would miss.
        while kafka.lag(app, topic) > 0:
            instance.check("processing")
            time.sleep(0.5)
        done = instance.sample()
        instance.stop()
        shutil.rmtree(state, ignore_errors=True)
        seconds = (done["ms"] - first["ms"]) / 1000
        result[f"threads_{threads}"] = {
            "records_per_s": records / seconds,
            "instance_cpu_us_per_record": (done["cpu"] - first["cpu"]) * 1e6 / records}
        progress(f"{threads} thread(s): {records / seconds:,.0f} records/s")
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


if __name__ == "__main__":
    main()
