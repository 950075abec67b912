// TxnTool: the Apache Kafka Java client's transactions, driven from pytest.
//
// Compiled at test time by system_tests/txn_java.py (next to KafkaTool, same
// jars and logging config). Every subcommand prints one JSON document per
// line on stdout; client logging goes to stderr. Exit code 0 on success, 1
// on a usage or client error (the JSON then has an "error" object).
//
// Subcommands:
//
//   txns --bootstrap B --topic T --txn-id ID --transactions N --records R
//        [--partitions P] [--offsets-group G] [--keys K]
//       Transaction i (from 0) sends R records, record j to partition
//       (i + j) % P with value "txn-<i>-<j>" (and, with --keys, key
//       "key-<j % K>"; no key otherwise); even i commit, odd i abort
//       (flushed first, so aborted records reach the log). With
//       --offsets-group, transaction i also sends offset i + 1 of T-0 for
//       group G (sendOffsetsToTransaction).
//       -> {"committed": [values], "aborted": [values]}
//   consume --bootstrap B --topic T --isolation read_committed|read_uncommitted
//        --expect N [--timeout-ms MS] [--settle-ms MS]
//       assign() every partition from the beginning; poll until N records
//       arrived (then settle-ms more, to catch extras) or the timeout.
//       -> {"records": [[partition, offset, value], ...]}
//   list-offsets --bootstrap B --topic T --isolation ...
//       Admin.listOffsets(latest) with that isolation level.
//       -> {"offsets": {"<partition>": offset}}
//   open --bootstrap B --topic T --txn-id ID --records R [--partitions P]
//        [--txn-timeout-ms MS]
//       Begin a transaction, send and flush R records (values "open-<j>"),
//       print {"ready": true}, then obey stdin lines: "commit", "abort" or
//       "exit" (leave the transaction open); prints {"result": ...} per line.
//   fence --bootstrap B --topic T --txn-id ID
//       Producer A opens a transaction; producer B inits the same id (fencing
//       A); A's commit must fail; B commits one record.
//       -> {"a_error": "<exception class>", "b_committed": true}

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsOptions;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.IsolationLevel;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class TxnTool {
    // Bound for metadata lookups, admin calls and transaction calls.
    static final Duration API_TIMEOUT = Duration.ofSeconds(30);
    static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    public static void main(String[] argv) {
        int exit = 0;
        try {
            Map<String, String> args = parse(argv);
            switch (argv[0]) {
                case "txns" -> txns(args);
                case "consume" -> consume(args);
                case "list-offsets" -> listOffsets(args);
                case "open" -> open(args);
                case "fence" -> fence(args);
                default -> throw new IllegalArgumentException("unknown subcommand " + argv[0]);
            }
        } catch (Exception e) {
            OUT.println(json(Map.of("error", describe(e))));
            exit = 1;
        }
        System.exit(exit);
    }

    static Map<String, String> parse(String[] argv) {
        if (argv.length == 0) throw new IllegalArgumentException("missing subcommand");
        Map<String, String> args = new HashMap<>();
        for (int i = 1; i + 1 < argv.length; i += 2) {
            if (!argv[i].startsWith("--")) throw new IllegalArgumentException("bad flag " + argv[i]);
            args.put(argv[i].substring(2), argv[i + 1]);
        }
        return args;
    }

    static String need(Map<String, String> args, String key) {
        String v = args.get(key);
        if (v == null) throw new IllegalArgumentException("missing --" + key);
        return v;
    }

    static int num(Map<String, String> args, String key, int dflt) {
        return args.containsKey(key) ? Integer.parseInt(args.get(key)) : dflt;
    }

    static Map<String, Object> describe(Throwable e) {
        Throwable cause = (e instanceof ExecutionException && e.getCause() != null) ? e.getCause() : e;
        Map<String, Object> err = new LinkedHashMap<>();
        err.put("class", cause.getClass().getSimpleName());
        err.put("message", String.valueOf(cause.getMessage()));
        return err;
    }

    static KafkaProducer<byte[], byte[]> producer(Map<String, String> args, String txnId) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, need(args, "bootstrap"));
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, txnId);
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, String.valueOf(num(args, "txn-timeout-ms", 60000)));
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(API_TIMEOUT.toMillis()));
        p.put(ProducerConfig.LINGER_MS_CONFIG, "0");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p);
        producer.initTransactions();
        return producer;
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int partition, String value) {
        return record(topic, partition, null, value);
    }

    static ProducerRecord<byte[], byte[]> record(String topic, int partition, String key,
                                                 String value) {
        return new ProducerRecord<>(topic, partition,
                                    key == null ? null : key.getBytes(StandardCharsets.UTF_8),
                                    value.getBytes(StandardCharsets.UTF_8));
    }

    static void txns(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        int n = num(args, "transactions", 1);
        int r = num(args, "records", 1);
        int partitions = num(args, "partitions", 1);
        String group = args.get("offsets-group");
        int keys = num(args, "keys", 0);
        List<String> committed = new ArrayList<>();
        List<String> aborted = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = producer(args, need(args, "txn-id"))) {
            for (int i = 0; i < n; i++) {
                producer.beginTransaction();
                List<String> values = new ArrayList<>();
                for (int j = 0; j < r; j++) {
                    String value = "txn-" + i + "-" + j;
                    String key = keys > 0 ? "key-" + (j % keys) : null;
                    producer.send(record(topic, (i + j) % partitions, key, value));
                    values.add(value);
                }
                if (group != null) {
                    producer.sendOffsetsToTransaction(
                        Map.of(new TopicPartition(topic, 0), new OffsetAndMetadata(i + 1)),
                        new ConsumerGroupMetadata(group));
                }
                producer.flush();
                if (i % 2 == 0) {
                    producer.commitTransaction();
                    committed.addAll(values);
                } else {
                    producer.abortTransaction();
                    aborted.addAll(values);
                }
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("committed", committed);
        out.put("aborted", aborted);
        OUT.println(json(out));
    }

    static void consume(Map<String, String> args) {
        String topic = need(args, "topic");
        int expect = num(args, "expect", 0);
        long deadline = System.currentTimeMillis() + num(args, "timeout-ms", 30000);
        int settle = num(args, "settle-ms", 1000);
        Properties p = new Properties();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, need(args, "bootstrap"));
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, need(args, "isolation"));
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        List<Object> records = new ArrayList<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(p)) {
            List<TopicPartition> tps = new ArrayList<>();
            for (PartitionInfo info : consumer.partitionsFor(topic, API_TIMEOUT)) {
                tps.add(new TopicPartition(topic, info.partition()));
            }
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            long settleUntil = Long.MAX_VALUE;
            while (System.currentTimeMillis() < Math.min(deadline, settleUntil)) {
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                    records.add(List.of(rec.partition(), rec.offset(),
                                        new String(rec.value(), StandardCharsets.UTF_8)));
                }
                if (records.size() >= expect && settleUntil == Long.MAX_VALUE) {
                    settleUntil = System.currentTimeMillis() + settle;
                }
            }
        }
        OUT.println(json(Map.of("records", records)));
    }

    static void listOffsets(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        IsolationLevel level = IsolationLevel.valueOf(need(args, "isolation").toUpperCase());
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, need(args, "bootstrap"));
        try (Admin admin = Admin.create(p)) {
            int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get()
                .get(topic).partitions().size();
            Map<TopicPartition, OffsetSpec> wanted = new HashMap<>();
            for (int i = 0; i < partitions; i++) wanted.put(new TopicPartition(topic, i), OffsetSpec.latest());
            Map<String, Object> offsets = new TreeMap<>();
            admin.listOffsets(wanted, new ListOffsetsOptions(level)).all().get()
                .forEach((tp, info) -> offsets.put(String.valueOf(tp.partition()), info.offset()));
            OUT.println(json(Map.of("offsets", offsets)));
        }
    }

    static void open(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        int partitions = num(args, "partitions", 1);
        KafkaProducer<byte[], byte[]> producer = producer(args, need(args, "txn-id"));
        producer.beginTransaction();
        for (int j = 0; j < num(args, "records", 1); j++) {
            producer.send(record(topic, j % partitions, "open-" + j));
        }
        producer.flush();
        OUT.println(json(Map.of("ready", true)));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String cmd = line.trim();
            try {
                switch (cmd) {
                    case "commit" -> producer.commitTransaction();
                    case "abort" -> producer.abortTransaction();
                    case "exit" -> {
                        OUT.println(json(Map.of("result", "exit")));
                        System.exit(0);
                    }
                    default -> throw new IllegalArgumentException("unknown command " + cmd);
                }
                OUT.println(json(Map.of("result", cmd)));
            } catch (Exception e) {
                OUT.println(json(Map.of("error", describe(e))));
            }
        }
        producer.close(Duration.ZERO);
    }

    static void fence(Map<String, String> args) throws Exception {
        String topic = need(args, "topic");
        String txnId = need(args, "txn-id");
        Map<String, Object> out = new LinkedHashMap<>();
        KafkaProducer<byte[], byte[]> a = producer(args, txnId);
        a.beginTransaction();
        a.send(record(topic, 0, "zombie-0"));
        a.flush();
        try (KafkaProducer<byte[], byte[]> b = producer(args, txnId)) {
            try {
                a.send(record(topic, 0, "zombie-1"));
                a.commitTransaction();
                out.put("a_error", null);
            } catch (Exception e) {
                out.put("a_error", describe(e).get("class"));
            }
            b.beginTransaction();
            b.send(record(topic, 0, "fencer-0"));
            b.commitTransaction();
            out.put("b_committed", true);
        } finally {
            a.close(Duration.ZERO);
        }
        OUT.println(json(out));
    }

    // -- minimal JSON writer ----------------------------------------------------------

    static String json(Object v) {
        StringBuilder sb = new StringBuilder();
        append(sb, v);
        return sb.toString();
    }

    static void append(StringBuilder sb, Object v) {
        if (v == null) {
            sb.append("null");
        } else if (v instanceof Number || v instanceof Boolean) {
            sb.append(v);
        } else if (v instanceof Map<?, ?> m) {
            sb.append('{');
            String sep = "";
            for (Map.Entry<?, ?> e : m.entrySet()) {
                sb.append(sep);
                sep = ",";
                string(sb, String.valueOf(e.getKey()));
                sb.append(':');
                append(sb, e.getValue());
            }
            sb.append('}');
        } else if (v instanceof Collection<?> c) {
            sb.append('[');
            String sep = "";
            for (Object item : c) {
                sb.append(sep);
                sep = ",";
                append(sb, item);
            }
            sb.append(']');
        } else {
            string(sb, v.toString());
        }
    }

    static void string(StringBuilder sb, String s) {
        sb.append('"');
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                    else sb.append(c);
                }
            }
        }
        sb.append('"');
    }
}
