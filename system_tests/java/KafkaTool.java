// KafkaTool: the Apache Kafka Java client, driven from pytest through a subprocess.
//
// Compiled at test time by system_tests/javatool.py (never committed as .class).
// Every subcommand prints exactly one JSON document on stdout; client logging
// goes to stderr. Exit codes: 0 success, 1 usage or client error (the JSON has
// an "error" object), 2 some produced records failed, 3 consume timed out.
//
// Subcommands (values are never optional once a flag is given):
//
//   Every subcommand also takes [--prop key=value]..., client properties
//   applied last to every producer, consumer and admin client it builds
//   (e.g. security.protocol=SSL, ssl.truststore.location=..., sasl.jaas.config=...).
//
//   produce --bootstrap B --topic T
//           (--input FILE | --count N [--size S] [--partition P])
//           [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
//           [--idempotent] [--linger-ms MS] [--batch-size BYTES] [--report-offsets]
//       --input is a TSV file, one record per line:
//           partition  key  value  timestamp  headers
//       with key/value base64 or "-" for null, partition/timestamp "-" for
//       unset, headers "name=base64,name=base64" or "-" for none.
//       Generated records: key "k<i>", value = generatedValue(i, S) below.
//   consume --bootstrap B --topic T [--partition P]... [--from-offset O]
//           [--start P:O]... [--expect N] [--group G] [--group-id G] [--timeout-ms MS]
//           [--digest] [--isolation read_committed|read_uncommitted]
//       assign()+seek() unless --group is given (then subscribe() and commit);
//       --group-id sets group.id while still assigning (Spark's Kafka source).
//       Reads until every partition reaches the end offset seen at start, or
//       until --expect records have arrived.
//   admin --bootstrap B <op> ...
//       create-topic --topic T [--partitions N] [--replication-factor R] [--config k=v]...
//       describe-topics --topic T...       list-topics
//       list-offsets --topic T [--partition P]... --spec SPEC
//           SPEC: earliest latest max-timestamp earliest-local latest-tiered
//                 earliest-pending-upload ts:<millis>
//       delete-records --topic T --before P:O...
//       describe-configs (--topic T | --broker ID)
//       alter-configs (--topic T | --broker ID) [--set k=v]... [--delete k]...
//       delete-topics --topic T...         describe-cluster
//       list-transactions [--state S]... [--producer-id PID]... [--duration-ms MS]
//       describe-transactions --txn-id ID...
//       describe-producers --topic T --partition P... [--broker ID]
//       abort-transaction --topic T --partition P --producer-id PID --producer-epoch E
//                         --coordinator-epoch CE
//   group-member --bootstrap B --topic T --group G
//       A long-running subscribe() member (set group.protocol etc. with --prop):
//       unlike the other subcommands it prints one JSON object per line as
//       things happen ({"ev":"assigned"|"revoked"|"lost","partitions":[..]},
//       {"ev":"batch","records":[[p,o],..],"ok":bool} after each commitSync),
//       and when stdin reaches end of file it closes the consumer (leaving
//       the group), prints {"ev":"closed"} and exits 0.
//       list-groups                        (id, type, state, protocol of every group)
//       describe-consumer-groups --group G...
//       delete-groups --group G...
//       group-offsets --group G             (committed offset of each partition)
//       member-protocols --group G          (each member's protocol, from MemberDescription.upgraded)
//   batch
//       Reads one command per stdin line (arguments separated by TABs), runs
//       them in this one JVM, prints a JSON array of {"exit": code, "result": {...}}.

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class KafkaTool {
    static final int EXIT_OK = 0;
    static final int EXIT_ERROR = 1;
    static final int EXIT_PRODUCE_FAILED = 2;
    static final int EXIT_TIMEOUT = 3;
    // How long admin calls and metadata lookups may take before we give up.
    static final Duration API_TIMEOUT = Duration.ofSeconds(30);
    // Keep the error list short: the first few failures explain the rest.
    static final int MAX_REPORTED_ERRORS = 10;

    /** A result: exit code plus the JSON-able object to print. */
    record Outcome(int exit, Map<String, Object> body) {}

    public static void main(String[] argv) throws Exception {
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        if (argv.length > 0 && argv[0].equals("batch")) {
            out.println(Json.write(runBatch()));
            System.exit(EXIT_OK);
        }
        Outcome outcome = runGuarded(argv);
        out.println(Json.write(outcome.body()));
        System.exit(outcome.exit());
    }

    static List<Object> runBatch() throws IOException {
        List<Object> results = new ArrayList<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) continue;
            Outcome outcome = runGuarded(line.split("\t"));
            Map<String, Object> item = new LinkedHashMap<>();
            item.put("exit", outcome.exit());
            item.put("result", outcome.body());
            results.add(item);
        }
        return results;
    }

    static Outcome runGuarded(String[] argv) {
        try {
            return run(argv);
        } catch (Exception e) {
            return new Outcome(EXIT_ERROR, Map.of("error", describeError(e)));
        }
    }

    static Outcome run(String[] argv) throws Exception {
        if (argv.length == 0) throw new IllegalArgumentException("missing subcommand");
        Args args = Args.parse(Arrays.copyOfRange(argv, 1, argv.length));
        return switch (argv[0]) {
            case "produce" -> Produce.run(args);
            case "consume" -> Consume.run(args);
            case "admin" -> AdminOps.run(args);
            case "group-member" -> GroupMember.run(args);
            default -> throw new IllegalArgumentException("unknown subcommand " + argv[0]);
        };
    }

    static Map<String, Object> describeError(Throwable e) {
        Throwable cause = (e instanceof ExecutionException && e.getCause() != null) ? e.getCause() : e;
        Map<String, Object> err = new LinkedHashMap<>();
        err.put("class", cause.getClass().getSimpleName());
        err.put("message", String.valueOf(cause.getMessage()));
        return err;
    }

    /** Deterministic payload for generated record i; mirrored in system_tests/messages.py. */
    static byte[] generatedValue(long i, int size) {
        byte[] value = new byte[size];
        for (int j = 0; j < size; j++) value[j] = (byte) ((i * 31 + j * 7) & 0xFF);
        return value;
    }

    static String b64(byte[] bytes) {
        return bytes == null ? null : Base64.getEncoder().encodeToString(bytes);
    }

    static byte[] unb64(String text) {
        return text.equals("-") ? null : Base64.getDecoder().decode(text);
    }

    static String sha256(byte[] bytes) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Apply every --prop key=value to a client's properties (overriding what the tool set). */
    static void applyProps(Properties p, Args args) {
        for (String kv : args.all("prop")) {
            String[] parts = kv.split("=", 2);
            if (parts.length != 2 || parts[0].isEmpty()) {
                throw new IllegalArgumentException("expected --prop key=value, got " + kv);
            }
            p.put(parts[0], parts[1]);
        }
    }

    static TopicPartition parsePartitionOffset(String topic, String spec, Map<TopicPartition, Long> into) {
        String[] parts = spec.split(":", 2);
        if (parts.length != 2) throw new IllegalArgumentException("expected P:O, got " + spec);
        TopicPartition tp = new TopicPartition(topic, Integer.parseInt(parts[0]));
        into.put(tp, Long.parseLong(parts[1]));
        return tp;
    }

    /** Command-line flags: "--name value" (repeatable) and bare "--flag". */
    static final class Args {
        private final Map<String, List<String>> values = new HashMap<>();
        private final List<String> positional = new ArrayList<>();

        static Args parse(String[] argv) {
            Args args = new Args();
            for (int i = 0; i < argv.length; i++) {
                if (!argv[i].startsWith("--")) {
                    args.positional.add(argv[i]);
                    continue;
                }
                String name = argv[i].substring(2);
                boolean hasValue = i + 1 < argv.length && !argv[i + 1].startsWith("--");
                String value = hasValue ? argv[++i] : "true";
                args.values.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
            }
            return args;
        }

        String required(String name) {
            String v = get(name, null);
            if (v == null) throw new IllegalArgumentException("missing --" + name);
            return v;
        }

        String get(String name, String fallback) {
            List<String> all = values.get(name);
            return all == null ? fallback : all.get(all.size() - 1);
        }

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }

        boolean flag(String name) {
            return values.containsKey(name);
        }

        List<String> positional() {
            return positional;
        }
    }

    static final class Produce {
        static Outcome run(Args args) throws Exception {
            String topic = args.required("topic");
            List<ProducerRecord<byte[], byte[]>> records = args.flag("input")
                    ? readInput(topic, Path.of(args.required("input")))
                    : generate(topic, args);
            List<Object[]> acks = new ArrayList<>(Collections.nCopies(records.size(), null));
            List<String> errors = new ArrayList<>();
            long[] failed = {0};
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config(args))) {
                for (int i = 0; i < records.size(); i++) {
                    final int index = i;
                    producer.send(records.get(i), (meta, error) -> {
                        synchronized (acks) {
                            if (error != null) {
                                failed[0]++;
                                if (errors.size() < MAX_REPORTED_ERRORS) errors.add(index + ": " + error);
                            } else {
                                acks.set(index, new Object[] {meta.partition(), meta.offset()});
                            }
                        }
                    });
                }
                producer.flush();
            }
            return new Outcome(failed[0] == 0 ? EXIT_OK : EXIT_PRODUCE_FAILED,
                    summarize(acks, errors, failed[0], args.flag("report-offsets")));
        }

        static Properties config(Args args) {
            Properties p = new Properties();
            p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
            p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            p.put(ProducerConfig.ACKS_CONFIG, args.get("acks", "all"));
            p.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, args.get("compression", "none"));
            boolean idempotent = args.flag("idempotent");
            p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, String.valueOf(idempotent));
            // Without idempotence, one request in flight keeps retries from reordering records.
            p.put(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, idempotent ? "5" : "1");
            p.put(ProducerConfig.LINGER_MS_CONFIG, args.get("linger-ms", "5"));
            p.put(ProducerConfig.BATCH_SIZE_CONFIG, args.get("batch-size", "16384"));
            p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
            p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
            p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
            applyProps(p, args);
            return p;
        }

        static List<ProducerRecord<byte[], byte[]>> generate(String topic, Args args) {
            int count = Integer.parseInt(args.required("count"));
            int size = Integer.parseInt(args.get("size", "100"));
            Integer partition = args.flag("partition") ? Integer.valueOf(args.required("partition")) : null;
            List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                byte[] key = ("k" + i).getBytes(StandardCharsets.UTF_8);
                records.add(new ProducerRecord<>(topic, partition, key, generatedValue(i, size)));
            }
            return records;
        }

        static List<ProducerRecord<byte[], byte[]>> readInput(String topic, Path file) throws IOException {
            List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
            for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
                if (line.isEmpty()) continue;
                String[] f = line.split("\t", -1);
                if (f.length != 5) throw new IllegalArgumentException("bad input line: " + line);
                Integer partition = f[0].equals("-") ? null : Integer.valueOf(f[0]);
                Long timestamp = f[3].equals("-") ? null : Long.valueOf(f[3]);
                records.add(new ProducerRecord<>(topic, partition, timestamp, unb64(f[1]), unb64(f[2]),
                        parseHeaders(f[4])));
            }
            return records;
        }

        static List<Header> parseHeaders(String field) {
            List<Header> headers = new ArrayList<>();
            if (field.equals("-")) return headers;
            for (String item : field.split(",")) {
                String[] kv = item.split("=", 2);
                headers.add(new RecordHeader(kv[0], unb64(kv[1])));
            }
            return headers;
        }

        static Map<String, Object> summarize(List<Object[]> acks, List<String> errors, long failed,
                boolean reportOffsets) {
            Map<String, Map<String, Object>> partitions = new TreeMap<>();
            List<Object> offsets = new ArrayList<>();
            long acked = 0;
            for (Object[] ack : acks) {
                offsets.add(ack == null ? null : List.of(ack[0], ack[1]));
                if (ack == null) continue;
                acked++;
                Map<String, Object> p = partitions.computeIfAbsent(String.valueOf(ack[0]),
                        k -> new LinkedHashMap<>(Map.of("count", 0L, "first", ack[1], "last", ack[1])));
                p.put("count", (Long) p.get("count") + 1);
                p.put("first", Math.min((Long) p.get("first"), (Long) ack[1]));
                p.put("last", Math.max((Long) p.get("last"), (Long) ack[1]));
            }
            Map<String, Object> body = new LinkedHashMap<>();
            body.put("acked", acked);
            body.put("failed", failed);
            body.put("errors", errors);
            body.put("partitions", partitions);
            if (reportOffsets) body.put("offsets", offsets);
            return body;
        }
    }

    static final class Consume {
        static Outcome run(Args args) throws Exception {
            String topic = args.required("topic");
            long timeoutMs = Long.parseLong(args.get("timeout-ms", "30000"));
            long expect = Long.parseLong(args.get("expect", "-1"));
            String group = args.get("group", null);
            if (group != null && expect < 0) throw new IllegalArgumentException("--group needs --expect");
            // Spark's Kafka source: group.id set, but assign()+seek(), never subscribe().
            String assignedGroup = args.get("group-id", null);
            List<Map<String, Object>> records = new ArrayList<>();
            Map<String, Object> body = new LinkedHashMap<>();
            boolean done;
            try (KafkaConsumer<byte[], byte[]> consumer =
                    new KafkaConsumer<>(config(args, group != null ? group : assignedGroup))) {
                Map<TopicPartition, Long> ends = group == null ? assign(consumer, topic, args) : null;
                if (group != null) consumer.subscribe(List.of(topic));
                long deadline = System.currentTimeMillis() + timeoutMs;
                done = finished(consumer, ends, records.size(), expect);
                while (!done && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                        records.add(toJson(r, args.flag("digest")));
                    }
                    done = finished(consumer, ends, records.size(), expect);
                }
                if (group != null && done) consumer.commitSync(API_TIMEOUT);
                if (ends != null) body.put("end_offsets", byPartition(ends));
            }
            body.put("status", done ? "ok" : "timeout");
            body.put("count", records.size());
            body.put("records", records);
            return new Outcome(done ? EXIT_OK : EXIT_TIMEOUT, body);
        }

        static Properties config(Args args, String group) {
            Properties p = new Properties();
            p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
            p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, args.get("isolation", "read_uncommitted"));
            if (group != null) p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            applyProps(p, args);
            return p;
        }

        /** Assign the chosen partitions, seek, and return the end offsets to read up to. */
        static Map<TopicPartition, Long> assign(KafkaConsumer<byte[], byte[]> consumer, String topic, Args args) {
            Map<TopicPartition, Long> starts = new LinkedHashMap<>();
            for (String spec : args.all("start")) parsePartitionOffset(topic, spec, starts);
            List<TopicPartition> chosen = new ArrayList<>(starts.keySet());
            if (chosen.isEmpty()) {
                List<String> wanted = args.all("partition");
                if (wanted.isEmpty()) {
                    for (PartitionInfo info : consumer.partitionsFor(topic, API_TIMEOUT)) {
                        chosen.add(new TopicPartition(topic, info.partition()));
                    }
                } else {
                    for (String p : wanted) chosen.add(new TopicPartition(topic, Integer.parseInt(p)));
                }
            }
            consumer.assign(chosen);
            String from = args.get("from-offset", null);
            for (TopicPartition tp : chosen) {
                Long start = starts.getOrDefault(tp, from == null ? null : Long.valueOf(from));
                if (start == null) consumer.seekToBeginning(List.of(tp));
                else consumer.seek(tp, start);
            }
            return consumer.endOffsets(chosen, API_TIMEOUT);
        }

        static boolean finished(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, Long> ends,
                long count, long expect) {
            if (expect >= 0) return count >= expect;
            if (ends == null) return false;
            for (Map.Entry<TopicPartition, Long> e : ends.entrySet()) {
                if (consumer.position(e.getKey(), API_TIMEOUT) < e.getValue()) return false;
            }
            return true;
        }

        static Map<String, Object> toJson(ConsumerRecord<byte[], byte[]> r, boolean digest) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("p", r.partition());
            m.put("o", r.offset());
            m.put("ts", r.timestamp());
            m.put("ts_type", r.timestampType().toString());
            m.put("k", b64(r.key()));
            if (digest) {
                m.put("v_sha256", r.value() == null ? null : sha256(r.value()));
                m.put("v_len", r.value() == null ? -1 : r.value().length);
            } else {
                m.put("v", b64(r.value()));
            }
            List<Object> headers = new ArrayList<>();
            for (Header h : r.headers()) headers.add(Arrays.asList(h.key(), b64(h.value())));
            m.put("h", headers);
            return m;
        }
    }

    static final class AdminOps {
        static Outcome run(Args args) throws Exception {
            if (args.positional().isEmpty()) throw new IllegalArgumentException("missing admin operation");
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args.required("bootstrap"));
            p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, String.valueOf(API_TIMEOUT.toMillis()));
            applyProps(p, args);
            try (Admin admin = Admin.create(p)) {
                Map<String, Object> body = switch (args.positional().get(0)) {
                    case "create-topic" -> createTopic(admin, args);
                    case "describe-topics" -> describeTopics(admin, args.all("topic"));
                    case "list-topics" -> Map.of("topics", admin.listTopics().names().get());
                    case "list-offsets" -> listOffsets(admin, args);
                    case "delete-records" -> deleteRecords(admin, args);
                    case "describe-configs" -> describeConfigs(admin, resource(args));
                    case "alter-configs" -> alterConfigs(admin, args);
                    case "delete-topics" -> deleteTopics(admin, args.all("topic"));
                    case "describe-cluster" -> describeCluster(admin);
                    case "create-acls" -> createAcls(admin, args.all("acl"));
                    case "describe-acls" -> describeAcls(admin);
                    case "delete-acls" -> deleteAcls(admin, args.all("acl"));
                    case "list-transactions", "describe-transactions", "describe-producers",
                         "abort-transaction" -> TransactionOps.run(admin, args);
                    case "describe-topics-paged" -> describeTopicsPaged(admin, args);
                    case "elect-leaders" -> electLeaders(admin, args);
                    case "broker-configs-describe", "broker-configs-alter" -> BrokerConfigOps.run(admin, args);
                    case "list-groups", "describe-consumer-groups", "delete-groups" ->
                        GroupOps.run(admin, args);
                    case "group-offsets" -> MigrationOps.groupOffsets(admin, args.required("group"));
                    case "member-protocols" -> MigrationOps.memberProtocols(admin, args.required("group"));
                    case "describe-features", "update-features" -> FeatureOps.run(admin, args);
                    case "group-configs-describe", "group-configs-alter", "describe-member-types" ->
                        GroupConfigOps.run(admin, args);
                    default -> throw new IllegalArgumentException("unknown admin op " + args.positional().get(0));
                };
                return new Outcome(EXIT_OK, body);
            }
        }

        static Map<String, Object> createTopic(Admin admin, Args args) throws Exception {
            String name = args.required("topic");
            NewTopic topic = new NewTopic(name, Integer.parseInt(args.get("partitions", "1")),
                    Short.parseShort(args.get("replication-factor", "1")));
            Map<String, String> configs = new LinkedHashMap<>();
            for (String kv : args.all("config")) {
                String[] parts = kv.split("=", 2);
                configs.put(parts[0], parts[1]);
            }
            topic.configs(configs);
            var result = admin.createTopics(List.of(topic));
            result.all().get();
            return Map.of("created", name, "topic_id", String.valueOf(result.topicId(name).get()));
        }

        static Map<String, Object> describeTopics(Admin admin, List<String> names) throws Exception {
            Map<String, Object> topics = new TreeMap<>();
            for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values()) {
                List<Object> partitions = new ArrayList<>();
                for (TopicPartitionInfo info : d.partitions()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("partition", info.partition());
                    m.put("leader", info.leader() == null ? null : info.leader().id());
                    m.put("replicas", nodeIds(info.replicas()));
                    m.put("isr", nodeIds(info.isr()));
                    partitions.add(m);
                }
                topics.put(d.name(), Map.of("topic_id", String.valueOf(d.topicId()),
                        "internal", d.isInternal(), "partitions", partitions));
            }
            return Map.of("topics", topics);
        }

        static List<Object> nodeIds(Collection<Node> nodes) {
            List<Object> ids = new ArrayList<>();
            for (Node n : nodes) ids.add(n.id());
            return ids;
        }

        static OffsetSpec offsetSpec(String spec) {
            if (spec.startsWith("ts:")) return OffsetSpec.forTimestamp(Long.parseLong(spec.substring(3)));
            return switch (spec) {
                case "earliest" -> OffsetSpec.earliest();
                case "latest" -> OffsetSpec.latest();
                case "max-timestamp" -> OffsetSpec.maxTimestamp();
                case "earliest-local" -> OffsetSpec.earliestLocal();
                case "latest-tiered" -> OffsetSpec.latestTiered();
                case "earliest-pending-upload" -> OffsetSpec.earliestPendingUpload();
                default -> throw new IllegalArgumentException("unknown offset spec " + spec);
            };
        }

        static Map<String, Object> listOffsets(Admin admin, Args args) throws Exception {
            String topic = args.required("topic");
            OffsetSpec spec = offsetSpec(args.required("spec"));
            List<TopicPartition> tps = new ArrayList<>();
            for (String p : args.all("partition")) tps.add(new TopicPartition(topic, Integer.parseInt(p)));
            if (tps.isEmpty()) {
                TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
                for (TopicPartitionInfo info : d.partitions()) tps.add(new TopicPartition(topic, info.partition()));
            }
            Map<TopicPartition, OffsetSpec> request = new LinkedHashMap<>();
            for (TopicPartition tp : tps) request.put(tp, spec);
            Map<String, Object> offsets = new TreeMap<>();
            for (var e : admin.listOffsets(request).all().get().entrySet()) {
                ListOffsetsResult.ListOffsetsResultInfo info = e.getValue();
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("offset", info.offset());
                m.put("timestamp", info.timestamp());
                m.put("leader_epoch", info.leaderEpoch().orElse(null));
                offsets.put(String.valueOf(e.getKey().partition()), m);
            }
            return Map.of("offsets", offsets);
        }

        static Map<String, Object> deleteRecords(Admin admin, Args args) throws Exception {
            String topic = args.required("topic");
            Map<TopicPartition, Long> before = new LinkedHashMap<>();
            for (String spec : args.all("before")) parsePartitionOffset(topic, spec, before);
            Map<TopicPartition, RecordsToDelete> request = new LinkedHashMap<>();
            before.forEach((tp, offset) -> request.put(tp, RecordsToDelete.beforeOffset(offset)));
            Map<String, Object> lows = new TreeMap<>();
            for (var e : admin.deleteRecords(request).lowWatermarks().entrySet()) {
                lows.put(String.valueOf(e.getKey().partition()), e.getValue().get().lowWatermark());
            }
            return Map.of("low_watermarks", lows);
        }

        static ConfigResource resource(Args args) {
            if (args.flag("topic")) return new ConfigResource(ConfigResource.Type.TOPIC, args.required("topic"));
            return new ConfigResource(ConfigResource.Type.BROKER, args.required("broker"));
        }

        static Map<String, Object> describeConfigs(Admin admin, ConfigResource resource) throws Exception {
            Config config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : config.entries()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("value", e.value());
                m.put("source", e.source().toString());
                m.put("read_only", e.isReadOnly());
                m.put("default", e.isDefault());
                m.put("sensitive", e.isSensitive());
                entries.put(e.name(), m);
            }
            return Map.of("configs", entries);
        }

        static Map<String, Object> alterConfigs(Admin admin, Args args) throws Exception {
            ConfigResource resource = resource(args);
            List<AlterConfigOp> ops = new ArrayList<>();
            for (String kv : args.all("set")) {
                String[] parts = kv.split("=", 2);
                ops.add(new AlterConfigOp(new ConfigEntry(parts[0], parts[1]), AlterConfigOp.OpType.SET));
            }
            for (String k : args.all("delete")) {
                ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
            }
            admin.incrementalAlterConfigs(Map.of(resource, ops)).all().get();
            return Map.of("altered", resource.name(), "ops", ops.size());
        }

        static Map<String, Object> deleteTopics(Admin admin, List<String> names) throws Exception {
            admin.deleteTopics(names).all().get();
            return Map.of("deleted", names);
        }

        /** An ACL written resourceType|patternType|name|principal|host|operation|permission. */
        static org.apache.kafka.common.acl.AclBinding acl(String text) {
            String[] f = text.split("\\|", -1);
            if (f.length != 7) throw new IllegalArgumentException("bad --acl " + text);
            return new org.apache.kafka.common.acl.AclBinding(
                    new org.apache.kafka.common.resource.ResourcePattern(
                            org.apache.kafka.common.resource.ResourceType.fromString(f[0]), f[2],
                            org.apache.kafka.common.resource.PatternType.fromString(f[1])),
                    new org.apache.kafka.common.acl.AccessControlEntry(f[3], f[4],
                            org.apache.kafka.common.acl.AclOperation.fromString(f[5]),
                            org.apache.kafka.common.acl.AclPermissionType.fromString(f[6])));
        }

        static String text(org.apache.kafka.common.acl.AclBinding b) {
            return String.join("|", b.pattern().resourceType().toString(),
                    b.pattern().patternType().toString(), b.pattern().name(), b.entry().principal(),
                    b.entry().host(), b.entry().operation().toString(),
                    b.entry().permissionType().toString());
        }

        static Map<String, Object> createAcls(Admin admin, List<String> acls) throws Exception {
            List<org.apache.kafka.common.acl.AclBinding> bindings = new ArrayList<>();
            for (String a : acls) bindings.add(acl(a));
            admin.createAcls(bindings).all().get();
            return Map.of("created", acls.size());
        }

        static Map<String, Object> describeAcls(Admin admin) throws Exception {
            List<String> out = new ArrayList<>();
            for (var b : admin.describeAcls(org.apache.kafka.common.acl.AclBindingFilter.ANY).values().get()) {
                out.add(text(b));
            }
            Collections.sort(out);
            return Map.of("acls", out);
        }

        static Map<String, Object> deleteAcls(Admin admin, List<String> acls) throws Exception {
            List<org.apache.kafka.common.acl.AclBindingFilter> filters = new ArrayList<>();
            for (String a : acls) filters.add(acl(a).toFilter());
            List<String> out = new ArrayList<>();
            for (var b : admin.deleteAcls(filters).all().get()) out.add(text(b));
            Collections.sort(out);
            return Map.of("deleted", out);
        }

        // -- DescribeTopicPartitions paging and ElectLeaders (issue 25) --------------

        /** describeTopics with a partition limit per DescribeTopicPartitions response
         * (the Admin follows the broker's cursor page by page); topics by name, or all. */
        static Map<String, Object> describeTopicsPaged(Admin admin, Args args) throws Exception {
            var options = new org.apache.kafka.clients.admin.DescribeTopicsOptions()
                    .partitionSizeLimitPerResponse(Integer.parseInt(args.get("limit", "2000")));
            List<String> names = args.all("topic");
            if (names.isEmpty()) names = new ArrayList<>(admin.listTopics().names().get());
            Map<String, Object> topics = new TreeMap<>();
            for (TopicDescription d : admin.describeTopics(names, options).allTopicNames().get().values()) {
                List<Object> partitions = new ArrayList<>();
                for (TopicPartitionInfo info : d.partitions()) {
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("partition", info.partition());
                    m.put("leader", info.leader() == null ? null : info.leader().id());
                    m.put("replicas", nodeIds(info.replicas()));
                    m.put("isr", nodeIds(info.isr()));
                    m.put("elr", info.elr() == null ? null : nodeIds(info.elr()));
                    m.put("last_known_elr", info.lastKnownElr() == null ? null : nodeIds(info.lastKnownElr()));
                    partitions.add(m);
                }
                topics.put(d.name(), Map.of("topic_id", String.valueOf(d.topicId()),
                        "internal", d.isInternal(), "partitions", partitions));
            }
            return Map.of("topics", topics);
        }

        /** electLeaders(--election-type preferred|unclean, --partition topic:p ... or all):
         * per partition, null when elected, else the error's class name. */
        static Map<String, Object> electLeaders(Admin admin, Args args) throws Exception {
            var type = org.apache.kafka.common.ElectionType.valueOf(
                    args.get("election-type", "preferred").toUpperCase(java.util.Locale.ROOT));
            java.util.Set<TopicPartition> partitions = null;
            if (!args.all("partition").isEmpty()) {
                partitions = new java.util.HashSet<>();
                for (String spec : args.all("partition")) {
                    int colon = spec.lastIndexOf(':');
                    partitions.add(new TopicPartition(spec.substring(0, colon),
                            Integer.parseInt(spec.substring(colon + 1))));
                }
            }
            Map<String, Object> out = new TreeMap<>();
            admin.electLeaders(type, partitions).partitions().get().forEach((tp, error) ->
                    out.put(tp.topic() + ":" + tp.partition(),
                            error.map(e -> (Object) e.getClass().getSimpleName()).orElse(null)));
            return Map.of("partitions", out);
        }

        static Map<String, Object> describeCluster(Admin admin) throws Exception {
            DescribeClusterResult result = admin.describeCluster();
            List<Object> nodes = new ArrayList<>();
            for (Node n : result.nodes().get()) {
                nodes.add(Map.of("id", n.id(), "host", n.host(), "port", n.port()));
            }
            Node controller = result.controller().get();
            Map<String, Object> body = new LinkedHashMap<>();
            body.put("cluster_id", result.clusterId().get());
            body.put("controller", controller == null ? null : controller.id());
            body.put("nodes", nodes);
            return body;
        }
    }

    /**
     * Dynamic broker configs as kafka-configs --entity-type brokers does them:
     * --broker N (that broker's entry, sent to it) or --default (the cluster default).
     */
    static final class BrokerConfigOps {
        static Map<String, Object> run(Admin admin, Args args) throws Exception {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.BROKER,
                    args.flag("default") ? "" : args.required("broker"));
            return switch (args.positional().get(0)) {
                case "broker-configs-describe" -> describe(admin, resource, args.all("key"));
                case "broker-configs-alter" -> alter(admin, resource, args);
                default -> throw new IllegalArgumentException("unknown op " + args.positional().get(0));
            };
        }

        /** Every entry (or the --key ones) with value, source, read-only flag and synonyms. */
        static Map<String, Object> describe(Admin admin, ConfigResource resource, List<String> keys) throws Exception {
            var options = new org.apache.kafka.clients.admin.DescribeConfigsOptions().includeSynonyms(true);
            Config config = admin.describeConfigs(List.of(resource), options).all().get().get(resource);
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : config.entries()) {
                if (!keys.isEmpty() && !keys.contains(e.name())) continue;
                List<Object> synonyms = new ArrayList<>();
                for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
                    synonyms.add(Arrays.asList(s.name(), s.value(), s.source().toString()));
                }
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("value", e.value());
                m.put("source", e.source().toString());
                m.put("read_only", e.isReadOnly());
                m.put("sensitive", e.isSensitive());
                m.put("synonyms", synonyms);
                entries.put(e.name(), m);
            }
            return Map.of("configs", entries);
        }

        /** incrementalAlterConfigs with --set k=v, --delete k, --append k=v, --subtract k=v. */
        static Map<String, Object> alter(Admin admin, ConfigResource resource, Args args) throws Exception {
            List<AlterConfigOp> ops = new ArrayList<>();
            Map<String, AlterConfigOp.OpType> kinds = Map.of("set", AlterConfigOp.OpType.SET,
                    "append", AlterConfigOp.OpType.APPEND, "subtract", AlterConfigOp.OpType.SUBTRACT);
            for (var kind : List.of("set", "append", "subtract")) {
                for (String kv : args.all(kind)) {
                    String[] parts = kv.split("=", 2);
                    ops.add(new AlterConfigOp(new ConfigEntry(parts[0], parts[1]), kinds.get(kind)));
                }
            }
            for (String k : args.all("delete")) {
                ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
            }
            var options = new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(args.flag("validate-only"));
            admin.incrementalAlterConfigs(Map.of(resource, ops), options).all().get();
            return Map.of("altered", resource.name(), "ops", ops.size());
        }
    }

    /** The KIP-664 transaction tooling calls of the Admin client (kafka-transactions). */
    static final class TransactionOps {
        static Map<String, Object> run(Admin admin, Args args) throws Exception {
            return switch (args.positional().get(0)) {
                case "list-transactions" -> list(admin, args);
                case "describe-transactions" -> describe(admin, args.all("txn-id"));
                case "describe-producers" -> producers(admin, args);
                case "abort-transaction" -> abort(admin, args);
                default -> throw new IllegalArgumentException("unknown op " + args.positional().get(0));
            };
        }

        static Map<String, Object> list(Admin admin, Args args) throws Exception {
            var options = new org.apache.kafka.clients.admin.ListTransactionsOptions();
            List<org.apache.kafka.clients.admin.TransactionState> states = new ArrayList<>();
            for (String s : args.all("state")) states.add(org.apache.kafka.clients.admin.TransactionState.parse(s));
            if (!states.isEmpty()) options.filterStates(states);
            List<Long> pids = new ArrayList<>();
            for (String p : args.all("producer-id")) pids.add(Long.parseLong(p));
            if (!pids.isEmpty()) options.filterProducerIds(pids);
            String duration = args.get("duration-ms", null);
            if (duration != null) options.filterOnDuration(Long.parseLong(duration));
            List<Object> out = new ArrayList<>();
            for (var t : admin.listTransactions(options).all().get()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("transactional_id", t.transactionalId());
                m.put("producer_id", t.producerId());
                m.put("state", t.state().toString());
                out.add(m);
            }
            out.sort((a, b) -> String.valueOf(((Map<?, ?>) a).get("transactional_id"))
                    .compareTo(String.valueOf(((Map<?, ?>) b).get("transactional_id"))));
            return Map.of("transactions", out);
        }

        static Map<String, Object> describe(Admin admin, List<String> ids) throws Exception {
            Map<String, Object> out = new TreeMap<>();
            var futures = admin.describeTransactions(ids);
            for (String id : ids) {
                try {
                    var d = futures.description(id).get();
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("coordinator", d.coordinatorId());
                    m.put("state", d.state().toString());
                    m.put("producer_id", d.producerId());
                    m.put("producer_epoch", d.producerEpoch());
                    m.put("timeout_ms", d.transactionTimeoutMs());
                    m.put("start_ms", d.transactionStartTimeMs().isPresent()
                            ? d.transactionStartTimeMs().getAsLong() : null);
                    List<String> tps = new ArrayList<>();
                    for (TopicPartition tp : d.topicPartitions()) tps.add(tp.topic() + ":" + tp.partition());
                    Collections.sort(tps);
                    m.put("partitions", tps);
                    out.put(id, m);
                } catch (ExecutionException e) {
                    out.put(id, Map.of("error", describeError(e)));
                }
            }
            return Map.of("transactions", out);
        }

        static Map<String, Object> producers(Admin admin, Args args) throws Exception {
            String topic = args.required("topic");
            List<TopicPartition> tps = new ArrayList<>();
            for (String p : args.all("partition")) tps.add(new TopicPartition(topic, Integer.parseInt(p)));
            var options = new org.apache.kafka.clients.admin.DescribeProducersOptions();
            String broker = args.get("broker", null);
            if (broker != null) options.brokerId(Integer.parseInt(broker));
            var result = admin.describeProducers(tps, options);
            Map<String, Object> out = new TreeMap<>();
            for (TopicPartition tp : tps) {
                try {
                    List<Object> rows = new ArrayList<>();
                    for (var s : result.partitionResult(tp).get().activeProducers()) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("producer_id", s.producerId());
                        m.put("producer_epoch", s.producerEpoch());
                        m.put("last_sequence", s.lastSequence());
                        m.put("last_timestamp", s.lastTimestamp());
                        m.put("coordinator_epoch", s.coordinatorEpoch().isPresent()
                                ? s.coordinatorEpoch().getAsInt() : null);
                        m.put("txn_start_offset", s.currentTransactionStartOffset().isPresent()
                                ? s.currentTransactionStartOffset().getAsLong() : null);
                        rows.add(m);
                    }
                    out.put(String.valueOf(tp.partition()), rows);
                } catch (ExecutionException e) {
                    out.put(String.valueOf(tp.partition()), Map.of("error", describeError(e)));
                }
            }
            return Map.of("partitions", out);
        }

        static Map<String, Object> abort(Admin admin, Args args) throws Exception {
            TopicPartition tp = new TopicPartition(args.required("topic"),
                    Integer.parseInt(args.required("partition")));
            var spec = new org.apache.kafka.clients.admin.AbortTransactionSpec(tp,
                    Long.parseLong(args.required("producer-id")),
                    Short.parseShort(args.required("producer-epoch")),
                    Integer.parseInt(args.required("coordinator-epoch")));
            admin.abortTransaction(spec).all().get();
            return Map.of("aborted", tp.topic() + ":" + tp.partition());
        }
    }

    /** The cluster's finalized features (KIP-584), as kafka-features describes and changes them. */
    static final class FeatureOps {
        static Map<String, Object> run(Admin admin, Args args) throws Exception {
            return switch (args.positional().get(0)) {
                case "describe-features" -> describe(admin);
                case "update-features" -> update(admin, args);
                default -> throw new IllegalArgumentException("unknown feature op " + args.positional().get(0));
            };
        }

        /** Finalized levels, supported ranges and the finalized-features epoch. */
        static Map<String, Object> describe(Admin admin) throws Exception {
            var metadata = admin.describeFeatures().featureMetadata().get();
            Map<String, Object> finalized = new TreeMap<>();
            metadata.finalizedFeatures().forEach((name, range) -> finalized.put(name, (int) range.maxVersionLevel()));
            Map<String, Object> supported = new TreeMap<>();
            metadata.supportedFeatures().forEach((name, range) ->
                    supported.put(name, List.of((int) range.minVersion(), (int) range.maxVersion())));
            Map<String, Object> body = new LinkedHashMap<>();
            body.put("finalized", finalized);
            body.put("supported", supported);
            body.put("epoch", metadata.finalizedFeaturesEpoch().orElse(null));
            return body;
        }

        /** --feature name=level (repeatable), --upgrade-type upgrade|safe|unsafe, --validate-only;
         *  each feature's outcome: NONE or the exception's class and message. */
        static Map<String, Object> update(Admin admin, Args args) throws Exception {
            var type = switch (args.get("upgrade-type", "upgrade")) {
                case "upgrade" -> org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UPGRADE;
                case "safe" -> org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.SAFE_DOWNGRADE;
                case "unsafe" -> org.apache.kafka.clients.admin.FeatureUpdate.UpgradeType.UNSAFE_DOWNGRADE;
                default -> throw new IllegalArgumentException("unknown upgrade type " + args.get("upgrade-type", ""));
            };
            Map<String, org.apache.kafka.clients.admin.FeatureUpdate> updates = new LinkedHashMap<>();
            for (String kv : args.all("feature")) {
                String[] parts = kv.split("=", 2);
                updates.put(parts[0], new org.apache.kafka.clients.admin.FeatureUpdate(Short.parseShort(parts[1]), type));
            }
            var options = new org.apache.kafka.clients.admin.UpdateFeaturesOptions().validateOnly(args.flag("validate-only"));
            Map<String, Object> results = new TreeMap<>();
            for (var e : admin.updateFeatures(updates, options).values().entrySet()) {
                try {
                    e.getValue().get();
                    results.put(e.getKey(), "NONE");
                } catch (ExecutionException ex) {
                    results.put(e.getKey(), ex.getCause().getClass().getSimpleName() + ": " + ex.getCause().getMessage());
                }
            }
            return Map.of("results", results);
        }
    }

    /** Per-group configs (ConfigResource.Type.GROUP) and KIP-1099 member types of consumer groups. */
    static final class GroupConfigOps {
        static Map<String, Object> run(Admin admin, Args args) throws Exception {
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, args.required("group"));
            return switch (args.positional().get(0)) {
                case "group-configs-describe" -> describe(admin, resource);
                case "group-configs-alter" -> alter(admin, resource, args);
                case "describe-member-types" -> memberTypes(admin, args.required("group"));
                default -> throw new IllegalArgumentException("unknown group config op " + args.positional().get(0));
            };
        }

        /** Each entry's value, source and synonyms, or the error's class and message. */
        static Map<String, Object> describe(Admin admin, ConfigResource resource) throws Exception {
            Config config;
            try {
                config = admin.describeConfigs(List.of(resource)).all().get().get(resource);
            } catch (ExecutionException e) {
                return Map.of("error", e.getCause().getClass().getSimpleName());
            }
            Map<String, Object> entries = new TreeMap<>();
            for (ConfigEntry e : config.entries()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("value", e.value());
                m.put("source", e.source().toString());
                m.put("default", e.isDefault());
                entries.put(e.name(), m);
            }
            return Map.of("configs", entries);
        }

        /** incrementalAlterConfigs with --set k=v, --delete k, --validate-only; "NONE" or the error. */
        static Map<String, Object> alter(Admin admin, ConfigResource resource, Args args) throws Exception {
            List<AlterConfigOp> ops = new ArrayList<>();
            for (String kv : args.all("set")) {
                String[] parts = kv.split("=", 2);
                ops.add(new AlterConfigOp(new ConfigEntry(parts[0], parts[1]), AlterConfigOp.OpType.SET));
            }
            for (String k : args.all("delete")) {
                ops.add(new AlterConfigOp(new ConfigEntry(k, null), AlterConfigOp.OpType.DELETE));
            }
            var options = new org.apache.kafka.clients.admin.AlterConfigsOptions().validateOnly(args.flag("validate-only"));
            try {
                admin.incrementalAlterConfigs(Map.of(resource, ops), options).all().get();
                return Map.of("result", "NONE");
            } catch (ExecutionException e) {
                return Map.of("result", e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
            }
        }

        /** Each member's MemberDescription.upgraded() (ConsumerGroupDescribe v1's MemberType). */
        static Map<String, Object> memberTypes(Admin admin, String group) throws Exception {
            var described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            Map<String, Object> members = new TreeMap<>();
            for (var m : described.members()) members.put(m.consumerId(), m.upgraded().map(Object::toString).orElse("unknown"));
            return Map.of("type", described.type().toString(), "members", members);
        }
    }

    static Map<String, Object> byPartition(Map<TopicPartition, Long> offsets) {
        Map<String, Object> m = new TreeMap<>();
        offsets.forEach((tp, o) -> m.put(String.valueOf(tp.partition()), o));
        return m;
    }

    /** Minimal JSON writer for maps, lists, strings, numbers, booleans and null. */
    /** Admin operations on consumer groups (classic and KIP-848). */
    static final class GroupOps {
        static Map<String, Object> run(Admin admin, Args args) throws Exception {
            return switch (args.positional().get(0)) {
                case "list-groups" -> listGroups(admin);
                case "describe-consumer-groups" -> describe(admin, args.all("group"));
                case "delete-groups" -> delete(admin, args.all("group"));
                default -> throw new IllegalArgumentException("unknown group op " + args.positional().get(0));
            };
        }

        static Map<String, Object> listGroups(Admin admin) throws Exception {
            List<Object> groups = new ArrayList<>();
            for (org.apache.kafka.clients.admin.GroupListing g : admin.listGroups().all().get()) {
                Map<String, Object> m = new LinkedHashMap<>();
                m.put("group", g.groupId());
                m.put("type", g.type().map(Object::toString).orElse(null));
                m.put("state", g.groupState().map(Object::toString).orElse(null));
                m.put("protocol", g.protocol());
                groups.add(m);
            }
            return Map.of("groups", groups);
        }

        static Map<String, Object> describe(Admin admin, List<String> ids) throws Exception {
            Map<String, Object> out = new TreeMap<>();
            var described = admin.describeConsumerGroups(ids).all().get();
            for (var e : described.entrySet()) {
                var d = e.getValue();
                Map<String, Object> g = new LinkedHashMap<>();
                g.put("type", d.type().toString());
                g.put("state", d.groupState().toString());
                g.put("assignor", d.partitionAssignor());
                g.put("group_epoch", d.groupEpoch().orElse(null));
                g.put("assignment_epoch", d.targetAssignmentEpoch().orElse(null));
                List<Object> members = new ArrayList<>();
                for (var m : d.members()) {
                    Map<String, Object> mm = new LinkedHashMap<>();
                    mm.put("member_id", m.consumerId());
                    mm.put("client_id", m.clientId());
                    mm.put("epoch", m.memberEpoch().orElse(null));
                    List<Integer> parts = new ArrayList<>();
                    for (TopicPartition tp : m.assignment().topicPartitions()) parts.add(tp.partition());
                    Collections.sort(parts);
                    mm.put("partitions", parts);
                    List<Integer> target = new ArrayList<>();
                    m.targetAssignment().ifPresent(t -> {
                        for (TopicPartition tp : t.topicPartitions()) target.add(tp.partition());
                    });
                    Collections.sort(target);
                    mm.put("target", target);
                    members.add(mm);
                }
                g.put("members", members);
                out.put(e.getKey(), g);
            }
            return out;
        }

        static Map<String, Object> delete(Admin admin, List<String> ids) {
            Map<String, Object> out = new TreeMap<>();
            for (var e : admin.deleteConsumerGroups(ids).deletedGroups().entrySet()) {
                try {
                    e.getValue().get();
                    out.put(e.getKey(), "ok");
                } catch (Exception ex) {
                    out.put(e.getKey(), describeError(ex).get("class"));
                }
            }
            return out;
        }
    }

    /** A subscribe() member that reports its assignments and commits as JSON lines. */
    static final class GroupMember {
        static Outcome run(Args args) throws Exception {
            String topic = args.required("topic");
            String group = args.required("group");
            PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
            java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            Thread watcher = new Thread(() -> {
                try {
                    while (System.in.read() >= 0) { /* wait for end of file */ }
                } catch (IOException e) { /* treat as end of file */ }
                stop.set(true);
            });
            watcher.setDaemon(true);
            watcher.start();
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(Consume.config(args, group))) {
                consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
                    public void onPartitionsRevoked(Collection<TopicPartition> parts) { emit(out, "revoked", parts); }
                    public void onPartitionsAssigned(Collection<TopicPartition> parts) { emit(out, "assigned", parts); }
                    public void onPartitionsLost(Collection<TopicPartition> parts) { emit(out, "lost", parts); }
                });
                while (!stop.get()) {
                    ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
                    if (batch.isEmpty()) continue;
                    List<Object> seen = new ArrayList<>();
                    for (ConsumerRecord<byte[], byte[]> r : batch) seen.add(List.of(r.partition(), r.offset()));
                    boolean ok = true;
                    try {
                        consumer.commitSync(API_TIMEOUT);
                    } catch (Exception e) {
                        ok = false;
                    }
                    Map<String, Object> ev = new LinkedHashMap<>();
                    ev.put("ev", "batch");
                    ev.put("records", seen);
                    ev.put("ok", ok);
                    out.println(Json.write(ev));
                }
            }
            return new Outcome(EXIT_OK, new LinkedHashMap<>(Map.of("ev", "closed")));
        }

        static void emit(PrintStream out, String ev, Collection<TopicPartition> parts) {
            List<Integer> ids = new ArrayList<>();
            for (TopicPartition tp : parts) ids.add(tp.partition());
            Collections.sort(ids);
            Map<String, Object> body = new LinkedHashMap<>();
            body.put("ev", ev);
            body.put("partitions", ids);
            out.println(Json.write(body));
        }
    }

    static final class Json {
        static String write(Object value) {
            StringBuilder sb = new StringBuilder();
            append(sb, value);
            return sb.toString();
        }

        static void append(StringBuilder sb, Object v) {
            if (v == null) {
                sb.append("null");
            } else if (v instanceof String s) {
                string(sb, s);
            } else if (v instanceof Number || v instanceof Boolean) {
                sb.append(v);
            } else if (v instanceof Map<?, ?> m) {
                sb.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) sb.append(',');
                    first = false;
                    string(sb, String.valueOf(e.getKey()));
                    sb.append(':');
                    append(sb, e.getValue());
                }
                sb.append('}');
            } else if (v instanceof Collection<?> c) {
                sb.append('[');
                boolean first = true;
                for (Object item : c) {
                    if (!first) sb.append(',');
                    first = false;
                    append(sb, item);
                }
                sb.append(']');
            } else {
                string(sb, v.toString());
            }
        }

        static void string(StringBuilder sb, String s) {
            sb.append('"');
            for (int i = 0; i < s.length(); i++) {
                char c = s.charAt(i);
                switch (c) {
                    case '"' -> sb.append("\\\"");
                    case '\\' -> sb.append("\\\\");
                    case '\n' -> sb.append("\\n");
                    case '\r' -> sb.append("\\r");
                    case '\t' -> sb.append("\\t");
                    default -> {
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                    }
                }
            }
            sb.append('"');
        }
    }

    /** Admin calls of the KIP-848 online migration tests. */
    static final class MigrationOps {
        /** The group's committed offsets, as {"offsets": {"topic:partition": offset}}. */
        static Map<String, Object> groupOffsets(Admin admin, String group) throws Exception {
            Map<String, Object> offsets = new TreeMap<>();
            var committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
            for (var e : committed.entrySet()) {
                if (e.getValue() != null) offsets.put(e.getKey().toString(), e.getValue().offset());
            }
            return Map.of("offsets", offsets);
        }

        /** {"members": [protocol...]} sorted: "consumer" (upgraded), "classic", or "unknown". */
        static Map<String, Object> memberProtocols(Admin admin, String group) throws Exception {
            List<String> protocols = new ArrayList<>();
            var described = admin.describeConsumerGroups(List.of(group)).all().get().get(group);
            for (var m : described.members()) {
                protocols.add(m.upgraded().map(u -> u ? "consumer" : "classic").orElse("unknown"));
            }
            Collections.sort(protocols);
            return Map.of("members", protocols);
        }
    }
}
