// What Debezium's outbox router (EventRouter, table.expand.json.payload=true)
// and Kafka's JsonConverter (schemas disabled) write of each payload, one
// per line of the file named by the first argument: the value's bytes as
// one line, or "CONVERT-FAIL" where the converter refuses the record the
// router made. The second argument, if any, is
// table.json.payload.null.behavior. For t/074_debezium_expansion.pl, which
// compares the lines with what outbox_debezium() stores. Run with
// java -cp '<Debezium's jars>/*' ExpandCheck.java payloads [behavior].
import io.debezium.data.Envelope;
import io.debezium.data.Json;
import io.debezium.data.Uuid;
import io.debezium.transforms.outbox.EventRouter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import org.apache.kafka.connect.data.Schema;
import org.apache.kafka.connect.data.SchemaBuilder;
import org.apache.kafka.connect.data.Struct;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;

public class ExpandCheck {
    public static void main(String[] args) throws Exception {
        // the row as Debezium's PostgreSQL connector hands it over: a text
        // payload column is a string (a jsonb one too, named io.debezium.data.Json)
        Schema row = SchemaBuilder.struct().name("check.public.outboxevent.Value")
                .field("id", Uuid.builder().build())
                .field("aggregatetype", Schema.STRING_SCHEMA)
                .field("aggregateid", Schema.OPTIONAL_STRING_SCHEMA)
                .field("payload", Json.builder().optional().build())
                .build();
        Schema source = SchemaBuilder.struct().name("check.Source")
                .field("db", Schema.OPTIONAL_STRING_SCHEMA).build();
        Envelope envelope = Envelope.defineSchema().withName("check.public.outboxevent.Envelope")
                .withRecord(row).withSource(source).build();

        Map<String, String> options = new HashMap<>();
        options.put("table.expand.json.payload", "true");
        if (args.length > 1)
            options.put("table.json.payload.null.behavior", args[1]);
        EventRouter<SourceRecord> router = new EventRouter<>();
        router.configure(options);
        JsonConverter converter = new JsonConverter();
        converter.configure(Map.of("schemas.enable", "false", "converter.type", "value"));

        StringBuilder out = new StringBuilder();
        for (String payload : Files.readAllLines(Path.of(args[0]), StandardCharsets.UTF_8)) {
            Struct after = new Struct(row).put("id", UUID.randomUUID().toString())
                    .put("aggregatetype", "check").put("aggregateid", "k").put("payload", payload);
            Struct value = envelope.create(after, new Struct(source).put("db", "check"), Instant.now());
            SourceRecord routed = router.apply(new SourceRecord(Map.of(), Map.of(), "check.public.outboxevent",
                    null, null, null, envelope.schema(), value));
            try {
                byte[] bytes = converter.fromConnectData(routed.topic(), routed.valueSchema(), routed.value());
                out.append(new String(bytes, StandardCharsets.UTF_8));
            }
            catch (Exception e) {
                out.append("CONVERT-FAIL");
            }
            out.append('\n');
        }
        System.out.print(out);
    }
}
