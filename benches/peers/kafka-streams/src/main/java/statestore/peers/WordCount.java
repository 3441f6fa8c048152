package statestore.peers;

import java.io.IOException;
import java.io.InputStream;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.LongAdder;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.processor.TaskId;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.ThreadMetadata;

/**
 * The peer of examples/partitioned-wordcount in Kafka Streams (Processor API): each input
 * record's key is a word, counted in the persistent RocksDB store {@code counts} by word and in
 * {@code letters} by its first letter, both logged to changelog topics and cached as the DSL has
 * them; nothing is sent downstream. The options are the word count's {@code run} options of the
 * same names, and so are the lines it writes to stderr:
 *
 * <pre>
 *   started: pid N
 *   first record of 0_2 at UNIX_MS ms        (per task, each time a task is created)
 *   processed N tasks [0_0, 0_1] standby [0_2]   (every second)
 *   restored counts 2: N records in MS ms
 *   closed after processing N records
 * </pre>
 */
public final class WordCount {
    static final String[] STORES = {"counts", "letters"};
    static final LongAdder PROCESSED = new LongAdder();

    private WordCount() {}

    static void log(String line) {
        System.err.println(line);
        System.err.flush();
    }

    /** Counts a record's word in both stores, as the word count's {@code count} does. */
    static final class Count implements Processor<String, String, Void, Void> {
        private KeyValueStore<String, Long> counts;
        private KeyValueStore<String, Long> letters;
        private TaskId task;
        private boolean first = true;

        @Override
        public void init(ProcessorContext<Void, Void> context) {
            counts = context.getStateStore("counts");
            letters = context.getStateStore("letters");
            task = context.taskId();
        }

        @Override
        public void process(Record<String, String> record) {
            if (first) {
                first = false;
                log("first record of " + task + " at " + System.currentTimeMillis() + " ms");
            }
            String word = record.key() == null ? "" : record.key();
            increment(counts, word);
            increment(letters, word.isEmpty() ? "" : word.substring(0, word.offsetByCodePoints(0, 1)));
            PROCESSED.increment();
        }

        private static void increment(KeyValueStore<String, Long> store, String key) {
            Long count = store.get(key);
            store.put(key, count == null ? 1L : count + 1);
        }
    }

    static Topology topology(String topic) {
        Topology topology = new Topology();
        topology.addSource("words", Serdes.String().deserializer(), Serdes.String().deserializer(), topic);
        topology.addProcessor("count", Count::new, "words");
        for (String store : STORES) {
            // Logged (the default) and cached, as the DSL's stores; plain key-value stores, not the
            // DSL's timestamped ones: the word count stores an 8-byte count, and so does this.
            topology.addStateStore(
                    Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(store), Serdes.String(), Serdes.Long())
                            .withCachingEnabled()
                            .withLoggingEnabled(Map.of()),
                    "count");
        }
        return topology;
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> options = new HashMap<>(Map.of(
                "bootstrap", "127.0.0.1:19092",
                "topic", "words",
                "application-id", "partitioned-wordcount",
                "commit-interval-ms", "1000",
                "session-timeout-ms", "10000",
                "num-standby-replicas", "0",
                "threads", "1",
                "processing-guarantee", "at_least_once"));
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) {
                throw new IllegalArgumentException("unexpected argument " + args[i]);
            }
            String name = args[i].substring(2);
            if (name.equals("stop-on-stdin-eof")) {
                options.put(name, "true");
            } else if (i + 1 < args.length) {
                options.put(name, args[++i]);
            } else {
                throw new IllegalArgumentException("--" + name + " needs a value");
            }
        }
        if (!options.containsKey("state-dir")) {
            throw new IllegalArgumentException("--state-dir is required");
        }
        String guarantee = options.get("processing-guarantee");
        if (!guarantee.equals("at_least_once") && !guarantee.equals("exactly_once_v2")) {
            throw new IllegalArgumentException("--processing-guarantee: expected at_least_once or exactly_once_v2");
        }
        return options;
    }

    static Properties config(Map<String, String> options) {
        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, options.get("application-id"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, options.get("bootstrap"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, options.get("state-dir"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, options.get("processing-guarantee"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, options.get("threads"));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, options.get("commit-interval-ms"));
        props.put(StreamsConfig.NUM_STANDBY_REPLICAS_CONFIG, options.get("num-standby-replicas"));
        long session = Long.parseLong(options.get("session-timeout-ms"));
        // The word count's session and heartbeat (a quarter of the session), not Kafka's 45 s.
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), Long.toString(session));
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG),
                Long.toString(Math.max(session / 4, 1)));
        if (options.containsKey("group-instance-id")) {
            props.put(StreamsConfig.consumerPrefix(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG),
                    options.get("group-instance-id"));
        }
        return props;
    }

    static String tasks(Set<TaskMetadata> tasks, Set<String> into) {
        for (TaskMetadata task : tasks) {
            into.add(task.taskId().toString());
        }
        return String.join(", ", into);
    }

    static void report(KafkaStreams streams) {
        Set<String> active = new TreeSet<>();
        Set<String> standby = new TreeSet<>();
        try {
            for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
                tasks(thread.activeTasks(), active);
                tasks(thread.standbyTasks(), standby);
            }
        } catch (RuntimeException notRunning) {
            // Between states (starting, closing): the tasks are reported the next second.
        }
        log("processed " + PROCESSED.sum() + " tasks [" + String.join(", ", active) + "] standby ["
                + String.join(", ", standby) + "]");
    }

    static final class Restores implements StateRestoreListener {
        private final Map<TopicPartition, Long> started = new ConcurrentHashMap<>();

        @Override
        public void onRestoreStart(TopicPartition partition, String store, long start, long end) {
            started.put(partition, System.currentTimeMillis());
        }

        @Override
        public void onBatchRestored(TopicPartition partition, String store, long end, long records) {}

        @Override
        public void onRestoreEnd(TopicPartition partition, String store, long records) {
            Long start = started.remove(partition);
            long ms = start == null ? 0 : System.currentTimeMillis() - start;
            log("restored " + store + " " + partition.partition() + ": " + records + " records in " + ms + " ms");
        }
    }

    public static void main(String[] args) throws InterruptedException {
        // Kafka's warnings and errors only (before the first logger exists).
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        Map<String, String> options;
        try {
            options = parse(args);
        } catch (IllegalArgumentException bad) {
            log("error: " + bad.getMessage());
            System.exit(2);
            return;
        }
        run(topology(options.get("topic")), options);
    }

    /**
     * Runs {@code topology} until stdin ends (with {@code --stop-on-stdin-eof}) or SIGTERM,
     * reporting on stderr as the class comment says; exits the JVM.
     */
    static void run(Topology topology, Map<String, String> options) throws InterruptedException {
        KafkaStreams streams = new KafkaStreams(topology, config(options));
        CountDownLatch stop = new CountDownLatch(1);
        int[] exit = {0};
        streams.setGlobalStateRestoreListener(new Restores());
        streams.setUncaughtExceptionHandler(failure -> {
            log("error: " + failure);
            exit[0] = 1;
            stop.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        CountDownLatch closed = new CountDownLatch(1);
        // SIGTERM: close cleanly before the JVM halts.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop.countDown();
            try {
                closed.await(90, java.util.concurrent.TimeUnit.SECONDS);
            } catch (InterruptedException interrupted) {
                Thread.currentThread().interrupt();
            }
        }));
        if (options.containsKey("stop-on-stdin-eof")) {
            Thread stdin = new Thread(() -> {
                try (InputStream in = System.in) {
                    byte[] sink = new byte[4096];
                    while (in.read(sink) >= 0) {
                        // Read to the end: the harness closes stdin to stop this instance.
                    }
                } catch (IOException ended) {
                    // Closed either way.
                }
                stop.countDown();
            }, "stdin");
            stdin.setDaemon(true);
            stdin.start();
        }
        streams.start();
        log("started: pid " + ProcessHandle.current().pid());
        while (!stop.await(1, java.util.concurrent.TimeUnit.SECONDS)) {
            report(streams);
        }
        streams.close(Duration.ofSeconds(60));
        log("closed after processing " + PROCESSED.sum() + " records");
        closed.countDown();
        System.exit(exit[0]);
    }
}
