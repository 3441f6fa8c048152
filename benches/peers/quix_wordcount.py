"""The peer of examples/partitioned-wordcount in Quix Streams: counts each record's key (a word)
in Quix's RocksDB state, logged to its changelog topic, committed every second.

    python quix_wordcount.py --bootstrap HOST:PORT --topic T --group G --state-dir DIR

Prints `first record at <unix ms>` on stderr when it processes its first record, and stops
cleanly on SIGTERM.
"""

import argparse
import sys
import time

from quixstreams import Application
from quixstreams.models.topics.manager import TopicManager

# Kafka's default retention, for a broker whose DescribeConfigs reports no topic configs
# (nisshi 0.8): Quix 3.28 reads "retention.ms" from it to configure its changelog topics and
# fails without it, though it tolerates a missing "retention.bytes".
KAFKA_DEFAULT_RETENTION_MS = "604800000"
_derive_topic_config = TopicManager.derive_topic_config


def _derive_with_default_retention(cls, topics):
    for topic in topics:
        extra = topic.broker_config.extra_config
        if "retention.ms" not in extra:
            extra["retention.ms"] = KAFKA_DEFAULT_RETENTION_MS
    return _derive_topic_config(topics)


TopicManager.derive_topic_config = classmethod(_derive_with_default_retention)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    args = parser.parse_args()

    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        commit_interval=1.0,
        state_dir=args.state_dir,
        loglevel="WARNING",
        processing_guarantee="at-least-once",
    )
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="str")
    first = [True]

    def count(value, key, timestamp, headers, state):
        if first[0]:
            first[0] = False
            print(f"first record at {int(time.time() * 1000)}", file=sys.stderr, flush=True)
        state.set("count", state.get("count", 0) + 1)
        return value

    app.dataframe(topic).apply(count, stateful=True, metadata=True)
    app.run()


if __name__ == "__main__":
    main()
