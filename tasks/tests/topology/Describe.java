// Prints Kafka Streams' description of the topology shape named by the first argument,
// built with its Processor API: tasks/tests/topology_kafka.rs builds the same shapes with
// statestore's builder and compares the two texts.
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;

public class Describe {
    static final class Noop<K, V, KOut, VOut> implements Processor<K, V, KOut, VOut> {
        @Override
        public void process(final Record<K, V> record) { }
    }

    static <K, V, KOut, VOut> ProcessorSupplier<K, V, KOut, VOut> noop() {
        return Noop::new;
    }

    static StoreBuilder<KeyValueStore<String, String>> store(String name) {
        return Stores.keyValueStoreBuilder(
            Stores.inMemoryKeyValueStore(name), Serdes.String(), Serdes.String());
    }

    public static void main(String[] args) {
        Topology t = new Topology();
        switch (args[0]) {
            case "rekey":
                t.addSource("lines", "text");
                t.addProcessor("split", noop(), "lines");
                t.addSink("to-words", "words-repartition", "split");
                t.addSource("words", "words-repartition");
                t.addProcessor("count", noop(), "words");
                t.addStateStore(store("counts"), "count");
                t.addSink("out", "counts", "count");
                break;
            case "shapes":
                t.addSource("orders", "orders");
                t.addProcessor("validate", noop(), "orders");
                t.addProcessor("audit", noop(), "orders");
                t.addProcessor("enrich", noop(), "validate", "audit");
                t.addSink("enriched", "enriched-orders", "enrich");
                t.addGlobalStore(store("customers").withLoggingDisabled(), "customers-source",
                    Serdes.String().deserializer(), Serdes.String().deserializer(), "customers",
                    "customers-keeper", Noop::new);
                t.addSource("payments", "payments");
                t.addProcessor("settle", noop(), "payments");
                t.addStateStore(store("balances"), "settle", "validate");
                t.addSource("clicks", "clicks");
                t.addProcessor("sessionize", noop(), "clicks");
                t.addProcessor("flag", noop(), "sessionize");
                t.addSink("flagged", "flags", "flag");
                t.addSink("per-user", "sessions-out", "sessionize");
                t.addStateStore(store("sessions"), "sessionize");
                t.addStateStore(store("visits"), "sessionize");
                break;
            default:
                throw new IllegalArgumentException("no shape " + args[0]);
        }
        System.out.print(t.describe());
    }
}
