// admin.js: what the tests' topic tools (create-topics.js,
// delete-topics.js) share: a kafkajs admin client on the cluster's
// bootstrap list for one call, and how a tool fails.
'use strict';

const { Kafka, logLevel } = require('kafkajs');

async function withAdmin(bootstrap, call) {
  const kafka = new Kafka({
    clientId: 'pg-outbox-tests-admin',
    brokers: bootstrap.split(','),
    logLevel: logLevel.NOTHING,
  });
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await call(admin);
  } finally {
    await admin.disconnect();
  }
}

// Runs main; on an error, its message on stderr and exit 1.
function runTool(name, main) {
  main().catch((e) => {
    process.stderr.write(`${name}: ${e.message}\n`);
    process.exit(1);
  });
}

module.exports = { withAdmin, runTool };
