#!/usr/bin/env node
// consume.js: reads a whole Kafka topic with kafkajs and parses each message
// with the CloudEvents SDK's Kafka binding: a second, independent client
// for the TAP tests (t/OutboxTest.pm's consume_js), beside kcat.
//
// Usage: node tools/js/consume.js <bootstrap> <topic> [idle_ms]
//
// Takes every partition's high watermark first (admin API), then reads each
// partition from its beginning with a consumer group of its own and stops
// once every partition reached the high watermark it had at the start: the
// messages present at the start, no more. If no message arrives for idle_ms
// (default 3000) after joining the group, it stops anyway and says on
// stderr which partitions it did not finish. A consumer that crashes on a
// retriable error (a fresh cluster's group coordinator still loading) is
// started again for up to 30 s.
//
// Prints one JSON line per message to stdout, sorted by partition then
// offset:
//   {"partition": 0, "offset": 5, "key": "k1" | null, "value": "..." | null,
//    "headers": {"name": "utf8 value", ...}, "timestamp": <ms>,
//    "cloudevent": {specversion, id, source, type, time, datacontenttype,
//                   data, <extensions>...} | null,
//    "cloudevent_error": null | "the SDK's message"}
// A null value (a tombstone) is null. Of a repeated header, the last value
// is kept. cloudevent is Kafka.toEvent()'s result as a plain object (its
// toJSON(): time normalized to an ISO string with milliseconds; JSON data
// parsed), or null with cloudevent_error when the SDK refuses the message
// (e.g. "No CloudEvent detected" without a ce_id header).
// Exit 0 on success; non-zero with a message on stderr on failure.
'use strict';

// before kafkajs: its read_committed filter lets some aborted records through
require('./read-committed').install();
const { Kafka, logLevel } = require('kafkajs');
const cloudevents = require('cloudevents');

const HARD_TIMEOUT_MS = 90000;
// how long a consumer that crashed on a retriable error is started again
const RESTART_FOR_MS = 30000;

function usage(message) {
  if (message) process.stderr.write(`consume.js: ${message}\n`);
  process.stderr.write('usage: node consume.js <bootstrap> <topic> [idle_ms]\n');
  process.exit(2);
}

function fail(err) {
  process.stderr.write(`consume.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
}

const [bootstrap, topic, idleArg] = process.argv.slice(2);
if (!bootstrap || !topic || process.argv.length > 5) usage();
const idleMs = idleArg === undefined ? 3000 : Number(idleArg);
if (!Number.isInteger(idleMs) || idleMs <= 0) usage(`bad idle_ms: ${idleArg}`);

// kafkajs logs errors only, to stderr (stdout is the JSON lines)
const logCreator = () => ({ namespace, label, log }) => {
  const { message, timestamp, logger, ...extra } = log;
  process.stderr.write(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`);
};

const kafka = new Kafka({
  clientId: 'pg-outbox-consume-js',
  brokers: bootstrap.split(','),
  logLevel: logLevel.ERROR,
  logCreator,
  connectionTimeout: 3000,
  retry: { retries: 5 },
});

const utf8 = (b) => (b === null || b === undefined ? null : Buffer.from(b).toString('utf8'));

function decode(partition, message) {
  const headers = {};
  for (const [name, v] of Object.entries(message.headers || {})) {
    headers[name] = utf8(Array.isArray(v) ? v[v.length - 1] : v);
  }
  const key = utf8(message.key);
  const value = utf8(message.value);
  const timestamp = Number(message.timestamp);
  let cloudevent = null;
  let cloudeventError = null;
  try {
    const event = cloudevents.Kafka.toEvent({ key, value, headers, timestamp });
    cloudevent = JSON.parse(JSON.stringify(event));
  } catch (e) {
    cloudeventError = e && e.message ? e.message : String(e);
  }
  return {
    partition,
    offset: Number(message.offset),
    key,
    value,
    headers,
    timestamp,
    cloudevent,
    cloudevent_error: cloudeventError,
  };
}

async function main() {
  const hard = setTimeout(() => fail(`timed out after ${HARD_TIMEOUT_MS} ms`), HARD_TIMEOUT_MS);

  // what is there now: partition -> [low, high)
  const admin = kafka.admin();
  await admin.connect();
  const offsets = await admin.fetchTopicOffsets(topic);
  await admin.disconnect();
  const target = new Map();
  for (const o of offsets) {
    if (BigInt(o.high) > BigInt(o.low)) target.set(o.partition, BigInt(o.high));
  }

  const records = new Map(); // "partition:offset" -> record, once each
  const restartUntil = Date.now() + RESTART_FOR_MS;
  if (target.size > 0) {
    const consumer = kafka.consumer({
      groupId: `pg-outbox-consume-js-${process.pid}-${Date.now()}-${Math.random().toString(36).slice(2)}`,
      // kafkajs asks this only of a retriable crash (e.g. a fresh cluster's
      // group coordinator still loading: one failed JoinGroup crashes it):
      // start again, every partition read from its beginning, records kept
      // once
      retry: { retries: 5, restartOnFailure: async () => Date.now() < restartUntil },
      // a fetch waits at most this for new data: disconnect() waits for it
      maxWaitTimeInMs: 250,
    });
    await new Promise((resolve, reject) => {
      let idle = null;
      const armIdle = () => {
        clearTimeout(idle);
        idle = setTimeout(() => {
          process.stderr.write(`consume.js: no message for ${idleMs} ms; partitions not read`
            + ` to their high watermark: ${[...target.keys()].join(',')}\n`);
          resolve();
        }, idleMs);
      };
      consumer.on(consumer.events.GROUP_JOIN, armIdle);
      consumer.on(consumer.events.CRASH, (e) => {
        clearTimeout(idle);
        if (!e.payload.restart) reject(e.payload.error);
      });
      consumer.connect()
        .then(() => consumer.subscribe({ topics: [topic], fromBeginning: true }))
        .then(() => consumer.run({
          autoCommit: false,
          eachBatch: async ({ batch }) => {
            const high = target.get(batch.partition);
            if (high === undefined) return;
            armIdle();
            for (const m of batch.messages) {
              if (BigInt(m.offset) < high) records.set(`${batch.partition}:${m.offset}`, decode(batch.partition, m));
            }
            // lastOffset() counts filtered control records too
            if (BigInt(batch.lastOffset()) + 1n >= high) {
              target.delete(batch.partition);
              if (target.size === 0) {
                clearTimeout(idle);
                resolve();
              }
            }
          },
        }))
        .catch(reject);
    });
    await consumer.disconnect();
  }

  const sorted = [...records.values()].sort((a, b) => a.partition - b.partition || a.offset - b.offset);
  const text = sorted.map((r) => `${JSON.stringify(r)}\n`).join('');
  // a pipe takes the text in parts: exit only once all of it is written
  await new Promise((resolve, reject) => {
    process.stdout.write(text, (err) => (err ? reject(err) : resolve()));
  });
  clearTimeout(hard);
}

main().then(() => process.exit(0), fail);
