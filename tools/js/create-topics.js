#!/usr/bin/env node
// create-topics.js: creates topics on a real cluster for the tests
// (t/KafkaCluster.pm's create_topics). Kafka's own TopicCommand starts a
// JVM per topic, seconds of CPU each on a machine the brokers already
// load; one Node process creates them all in one request.
//
// Usage: node tools/js/create-topics.js <bootstrap> < topics.json
// topics.json: [{"topic": "t", "numPartitions": 3, "replicationFactor": 3,
//   "replicaAssignment": [{"partition": 0, "replicas": [1, 2, 3]}],
//   "configEntries": [{"name": "cleanup.policy", "value": "compact"}]}, ...]
// (kafkajs's createTopics fields). Waits until each has leaders.
// Exit 0 when all were created; non-zero with the error on stderr.
'use strict';

const { withAdmin, runTool } = require('./admin');

async function main() {
  const [bootstrap] = process.argv.slice(2);
  if (!bootstrap) throw new Error('usage: create-topics.js <bootstrap> < topics.json');
  const topics = JSON.parse(require('fs').readFileSync(0, 'utf8'));
  const created = await withAdmin(bootstrap,
    (admin) => admin.createTopics({ topics, waitForLeaders: true, timeout: 60000 }));
  if (!created) throw new Error('a topic of these exists already');
}

runTool('create-topics.js', main);
