#!/usr/bin/env node
// abort-interleaved.js: writes to partition 0 of a topic two transactions
// that overlap and are aborted in the opposite order of their start, then
// one committed record: what a read_committed consumer must read is that
// record alone. The broker lists such aborted transactions in the order of
// their abort markers, which kafkajs's own filter mistook for the order of
// their first offsets (see read-committed.js): the TAP tests check with it
// that the JS client they read exactly-once delivery with is not fooled.
//
// Usage: node tools/js/abort-interleaved.js <bootstrap> <topic>
// Prints the committed record's value; exit 0 on success.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

const [bootstrap, topic] = process.argv.slice(2);
if (!bootstrap || !topic) {
  process.stderr.write('usage: node abort-interleaved.js <bootstrap> <topic>\n');
  process.exit(2);
}

const kafka = new Kafka({ clientId: 'abort-interleaved', brokers: bootstrap.split(','), logLevel: logLevel.ERROR });

function transactional(id) {
  return kafka.producer({ transactionalId: `${topic}-${id}`, idempotent: true, maxInFlightRequests: 1 });
}

const send = (tx, value) => tx.send({ topic, messages: [{ partition: 0, value }] });

async function main() {
  const first = transactional('first');
  const second = transactional('second');
  const plain = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  for (const p of [first, second, plain]) await p.connect();
  const t1 = await first.transaction();
  await send(t1, 'aborted-first-1');
  const t2 = await second.transaction();
  await send(t2, 'aborted-second');
  await t2.abort();
  await send(t1, 'aborted-first-2');
  await t1.abort();
  await plain.send({ topic, acks: -1, messages: [{ partition: 0, value: 'committed' }] });
  for (const p of [first, second, plain]) await p.disconnect();
  process.stdout.write('committed\n');
}

main().catch(err => {
  process.stderr.write(`abort-interleaved.js: ${err && err.stack ? err.stack : err}\n`);
  process.exit(1);
});
