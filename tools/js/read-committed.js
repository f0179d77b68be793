// read-committed.js: kafkajs 2.2.4's filter of aborted transactions, done
// the way Kafka's Java consumer does it. Required before kafkajs, it takes
// the place of kafkajs's own filter (src/consumer/filterAbortedMessages.js)
// in Node's module cache.
//
// Why: a fetch response lists the aborted transactions of the fetched range
// in the order the broker wrote their abort markers, not by their first
// offset, and kafkajs's filter assumes the latter and starts at most one
// aborted transaction per message. With several transactional producers on
// a partition (pg_outbox's shards in exactly-once mode), a transaction that
// began before another but was aborted after it slipped through: kafkajs
// handed out records of aborted transactions as if committed. Here every
// aborted transaction whose first offset a message has reached is started,
// in first-offset order, before the message is judged.
'use strict';

const Module = require('module');
const path = require('path');
const Long = require('kafkajs/src/utils/long');

const ABORT_MARKER_KEY = Buffer.from([0, 0, 0, 0]);

function isAbortMarker(message) {
  return !!message.key && Buffer.from(message.key).equals(ABORT_MARKER_KEY);
}

// messages in offset order (one fetch of one partition); abortedTransactions
// as the broker sent them: [{ producerId, firstOffset }]
function filterAbortedMessages({ messages, abortedTransactions }) {
  if (!abortedTransactions || !abortedTransactions.length) return messages;
  const pending = [...abortedTransactions].sort((a, b) =>
    Long.fromValue(a.firstOffset).compare(Long.fromValue(b.firstOffset)));
  const aborting = new Set();
  return messages.filter(message => {
    const offset = Long.fromValue(message.offset);
    while (pending.length && offset.gte(Long.fromValue(pending[0].firstOffset))) {
      aborting.add(String(pending.shift().producerId));
    }
    const { producerId, inTransaction } = message.batchContext;
    if (isAbortMarker(message)) {
      aborting.delete(String(producerId));
      return true;
    }
    return !(inTransaction && aborting.has(String(producerId)));
  });
}

// Puts filterAbortedMessages where kafkajs's batch.js will require its own.
function install() {
  const file = require.resolve(path.join('kafkajs', 'src', 'consumer', 'filterAbortedMessages.js'));
  const m = new Module(file, module);
  m.filename = file;
  m.loaded = true;
  m.exports = filterAbortedMessages;
  require.cache[file] = m;
}

module.exports = { filterAbortedMessages, install };
