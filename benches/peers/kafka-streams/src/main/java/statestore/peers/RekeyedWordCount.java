package statestore.peers;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * The peer of {@code partitioned-wordcount run --rekey} in Kafka Streams' DSL: lines without a
 * key ({@code produce --unkeyed-lines}) split into words ({@code flatMapValues}), re-keyed by
 * word through the repartition topic {@code <application.id>-words-by-word-repartition}
 * ({@code groupBy}) and counted in the persistent RocksDB store {@code counts} ({@code count},
 * the DSL's defaults: logged and cached); each count that leaves the cache goes to
 * {@code --output-topic} (8 bytes, big-endian). Options and stderr lines are
 * {@link WordCount}'s; "processed" counts the counts sent downstream.
 */
public final class RekeyedWordCount {
    private static final AtomicBoolean FIRST = new AtomicBoolean(true);

    private RekeyedWordCount() {}

    static Topology topology(String topic, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        builder.stream(topic, Consumed.with(Serdes.String(), Serdes.String()))
                .peek((key, line) -> {
                    if (FIRST.getAndSet(false)) {
                        WordCount.log("first record of lines at " + System.currentTimeMillis() + " ms");
                    }
                })
                .flatMapValues(line -> Arrays.asList(line.split(" ")))
                .groupBy((key, word) -> word, Grouped.with("words-by-word", Serdes.String(), Serdes.String()))
                .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts")
                        .withKeySerde(Serdes.String())
                        .withValueSerde(Serdes.Long()))
                .toStream()
                .peek((word, count) -> WordCount.PROCESSED.increment())
                .to(output, Produced.with(Serdes.String(), Serdes.Long()));
        return builder.build();
    }

    public static void main(String[] args) throws InterruptedException {
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> options;
        try {
            options = WordCount.parse(args);
            if (!options.containsKey("output-topic")) {
                throw new IllegalArgumentException("--output-topic is required");
            }
        } catch (IllegalArgumentException bad) {
            WordCount.log("error: " + bad.getMessage());
            System.exit(2);
            return;
        }
        WordCount.run(topology(options.get("topic"), options.get("output-topic")), options);
    }
}
