#!/usr/bin/env node
// delete-topics.js: deletes topics on a real cluster (t/KafkaCluster.pm's
// delete_topics), in one request of one Node process, as create-topics.js
// creates them: the benchmark's loads each write to fresh topics, and
// three brokers on two cores slow down as their partitions pile up.
//
// Usage: node tools/js/delete-topics.js <bootstrap> <topic>...
// Exit 0 once Kafka accepted the deletion; non-zero with the error on stderr.
'use strict';

const { withAdmin, runTool } = require('./admin');

async function main() {
  const [bootstrap, ...topics] = process.argv.slice(2);
  if (!bootstrap || topics.length === 0) throw new Error('usage: delete-topics.js <bootstrap> <topic>...');
  await withAdmin(bootstrap, (admin) => admin.deleteTopics({ topics, timeout: 60000 }));
}

runTool('delete-topics.js', main);
