#!/usr/bin/env python3
# Reads a Kafka topic the way a consumer of Confluent's wire format does:
# every record's value (and key, if asked) decoded by confluent-kafka's own
# AvroDeserializer, JSONDeserializer or ProtobufDeserializer, which fetch
# the writer's schema by the id in the record. It is the tests' oracle for
# pg_outbox's framing, so it decodes nothing itself and fails loudly on a
# record the library cannot decode. One JSON line per record: partition,
# offset, key, value (decoded), schema_id, for Protobuf message_indexes and
# message (the type the library read from the indexes), headers.
#
# Usage: read.py --bootstrap B --topic T --registry URL --format F
#          [--count N] [--timeout S] [--isolation read_committed]
#          [--key-format F] [--user U:P] [--token T] [--ca FILE]
import argparse
import base64
import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.schema_registry import SchemaRegistryClient, dual_schema_id_deserializer
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, empty_pb2, json_format
from google.protobuf.message_factory import GetMessageClass


class Decoder:
    """One part (value or key) of the records, in one format."""

    def __init__(self, fmt, registry):
        self.fmt, self.registry = fmt, registry
        # what the library parsed from the framing, and the Protobuf type
        # it found for the message indexes (handed to the subject strategy)
        self.last_id = None
        self.last_message = None
        conf = {'schema.id.deserializer': self._schema_id}
        if fmt == 'avro':
            self.plain = AvroDeserializer(registry, conf=conf)
        elif fmt == 'json_schema':
            self.plain = JSONDeserializer(None, schema_registry_client=registry, conf=conf)
        elif fmt == 'protobuf':
            self.protobuf_conf = dict(conf, **{'subject.name.strategy': self._record_name})
            # the library parses with the class it is given, and reads the
            # writer's type from the indexes only to name the subject: a
            # first pass with an empty message learns that type, the second
            # decodes with it
            self.probe = ProtobufDeserializer(empty_pb2.Empty, self.protobuf_conf, registry)
            self.by_type = {}
        elif fmt != 'none':
            raise SystemExit('read.py: unknown format ' + fmt)

    def _schema_id(self, data, ctx, schema_id):
        payload = dual_schema_id_deserializer(data, ctx, schema_id)
        self.last_id = schema_id
        return payload

    def _record_name(self, ctx, record_name):
        if record_name is not None:
            self.last_message = record_name
        return None

    def decode(self, data, ctx):
        self.last_id = self.last_message = None
        if data is None:
            return None
        if self.fmt == 'none':
            return data.decode('utf-8', 'backslashreplace')
        if self.fmt != 'protobuf':
            return self.plain(data, ctx)
        self.probe(data, ctx)
        name = self.last_message
        msg = self._deserializer(self.last_id.id, name)(data, ctx)
        if self.last_message != name or msg.DESCRIPTOR.full_name != name:
            raise RuntimeError('the message indexes named %s, then %s' % (name, self.last_message))
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)

    # A deserializer for Protobuf type NAME of schema ID, its class made
    # from the descriptor the registry serves (format=serialized, base64).
    def _deserializer(self, schema_id, name):
        key = (schema_id, name)
        if key not in self.by_type:
            schema = self.registry.get_schema(schema_id, fmt='serialized')
            fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(schema.schema_str))
            pool = descriptor_pool.DescriptorPool()
            for dep in fdp.dependency:
                pool.AddSerializedFile(descriptor_pool.Default().FindFileByName(dep).serialized_pb)
            pool.Add(fdp)
            cls = GetMessageClass(pool.FindMessageTypeByName(name))
            self.by_type[key] = ProtobufDeserializer(cls, self.protobuf_conf, self.registry)
        return self.by_type[key]

    def describe(self, out, prefix):
        if self.fmt in ('none', None) or self.last_id is None:
            return
        out[prefix + 'schema_id'] = self.last_id.id
        if self.fmt == 'protobuf':
            out[prefix + 'message_indexes'] = self.last_id.message_indexes
            out[prefix + 'message'] = self.last_message


def jsonable(v):
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError('cannot print %r' % type(v))


def parse_args():
    p = argparse.ArgumentParser(description='Decode a topic with the Confluent deserializers')
    p.add_argument('--bootstrap', required=True)
    p.add_argument('--topic', required=True)
    p.add_argument('--registry', required=True, help='the registry URL (a Confluent API)')
    p.add_argument('--format', required=True, choices=['avro', 'json_schema', 'protobuf'])
    p.add_argument('--key-format', default='none', choices=['none', 'avro', 'json_schema', 'protobuf'])
    p.add_argument('--count', type=int, default=0, help='wait for at least this many records')
    p.add_argument('--timeout', type=float, default=60)
    p.add_argument('--isolation', default='read_committed', choices=['read_committed', 'read_uncommitted'])
    p.add_argument('--user', help='basic auth, USER:PASSWORD')
    p.add_argument('--token', help='a bearer token')
    p.add_argument('--ca', help="the CA file of the registry's certificate")
    return p.parse_args()


def registry_client(a):
    conf = {'url': a.registry}
    if a.user:
        conf['basic.auth.user.info'] = a.user
    if a.token:
        conf.update({'bearer.auth.credentials.source': 'STATIC_TOKEN', 'bearer.auth.token': a.token,
                     'bearer.auth.logical.cluster': 'lsrc-test'})
    if a.ca:
        conf['ssl.ca.location'] = a.ca
    return SchemaRegistryClient(conf)


# Assigns every partition of the topic from its beginning (no group
# offsets): the whole topic, as kcat -e reads it.
def open_consumer(a):
    consumer = Consumer({'bootstrap.servers': a.bootstrap, 'group.id': 'read-py-' + uuid.uuid4().hex,
                         'enable.auto.commit': False, 'enable.partition.eof': True,
                         'isolation.level': a.isolation})
    meta = consumer.list_topics(a.topic, timeout=30)
    t = meta.topics.get(a.topic)
    if t is None or t.error is not None or not t.partitions:
        raise SystemExit('read.py: no topic %s: %s' % (a.topic, t.error if t else 'missing'))
    parts = sorted(t.partitions)
    consumer.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in parts])
    return consumer, set(parts)


def main():
    a = parse_args()
    registry = registry_client(a)
    value_dec = Decoder(a.format, registry)
    key_dec = Decoder(a.key_format, registry)
    consumer, parts = open_consumer(a)
    at_end, read = set(), 0
    deadline = time.time() + a.timeout
    try:
        while read < a.count or at_end != parts:
            if time.time() > deadline:
                raise SystemExit('read.py: timed out after %.0f s with %d of %d records read'
                                 % (a.timeout, read, a.count))
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise SystemExit('read.py: ' + str(m.error()))
            at_end.discard(m.partition())
            headers = m.headers() or []
            out = {'partition': m.partition(), 'offset': m.offset()}
            try:
                out['key'] = key_dec.decode(m.key(), SerializationContext(a.topic, MessageField.KEY, headers))
                key_dec.describe(out, 'key_')
                out['value'] = value_dec.decode(m.value(), SerializationContext(a.topic, MessageField.VALUE, headers))
                value_dec.describe(out, '')
            except Exception as e:
                raise SystemExit('read.py: cannot decode %s [%d] offset %d (value %s): %s: %s'
                                 % (a.topic, m.partition(), m.offset(), (m.value() or b'')[:24].hex(),
                                    type(e).__name__, e))
            out['headers'] = {k: (v.decode('utf-8', 'backslashreplace') if v is not None else None)
                              for k, v in headers}
            print(json.dumps(out, default=jsonable, sort_keys=True), flush=True)
            read += 1
    finally:
        consumer.close()


if __name__ == '__main__':
    main()
