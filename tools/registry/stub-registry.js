// A small schema registry for the tests, speaking the Confluent REST calls
// pg_outbox and the Confluent deserializers make, where Apicurio cannot
// serve: Protobuf descriptors as base64 (format=serialized, as Confluent
// does; Apicurio returns raw bytes), basic auth and bearer tokens, TLS, and
// faults a test switches on and off through a control port: the registry
// down (its port closed), answering with an error status, or slow. It logs
// every request so a test can see what a client asked and how it
// authenticated. Node's standard library only; protoc compiles Protobuf
// schemas (the one registry rejects what protoc rejects).
//
// node stub-registry.js [--user USER:PASSWORD] [--token TOKEN]
//                       [--cert FILE --key FILE] [--port N]
// prints "REGISTRY <url> CONTROL <url>" once listening; stops when its
// stdin closes or on SIGTERM. The control port (plain HTTP, loopback):
//   POST /down, POST /up                 close / reopen the registry's port
//   POST /fail {"status":503,"match":"^GET /schemas","times":2}
//                                        answer matching requests
//                                        ("METHOD /path") with the status
//   DELETE /fail                         no more failures
//   POST /slow {"ms":3000}               delay every answer
//   GET /requests, DELETE /requests      the request log: method, path,
//                                        auth (none|basic:USER|bearer|bad), status
'use strict';

const http = require('http');
const https = require('https');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');

const opts = {};
for (let i = 2; i < process.argv.length; i += 2)
	opts[process.argv[i].replace(/^--/, '')] = process.argv[i + 1];

const CONTENT_TYPE = 'application/vnd.schemaregistry.v1+json';
const schemas = [];       // id - 1 -> {type, schema, references, serialized}
const subjects = new Map();   // subject -> [{version, id, deleted}]
const failures = [];      // {status, match: RegExp, times}
let slowMs = 0;
let requests = [];

class HttpError extends Error
{
	constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

// The serialized form Confluent serves for a Protobuf schema: its
// FileDescriptorProto (protoc's descriptor set holds one per file, field 1).
function compileProto(text)
{
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stub-registry-'));
	try
	{
		fs.writeFileSync(path.join(dir, 'default.proto'), text);
		const includes = fs.existsSync('/usr/include/google/protobuf') ? ['-I', '/usr/include'] : [];
		let set;
		try
		{
			execFileSync('protoc', ['-I', dir, ...includes, `--descriptor_set_out=${dir}/set.pb`,
				'default.proto'], { stdio: ['ignore', 'pipe', 'pipe'] });
			set = fs.readFileSync(path.join(dir, 'set.pb'));
		}
		catch (e)
		{
			throw new HttpError(422, 42201, 'Invalid schema: ' + String(e.stderr).trim());
		}
		if (set[0] !== 0x0a)
			throw new Error('protoc wrote no FileDescriptorProto');
		let len = 0, shift = 0, at = 1;
		for (;;)
		{
			const b = set[at++];
			len += (b & 0x7f) * 2 ** shift;
			shift += 7;
			if (!(b & 0x80))
				break;
		}
		return set.subarray(at, at + len).toString('base64');
	}
	finally
	{
		fs.rmSync(dir, { recursive: true, force: true });
	}
}

function checkSchema(type, text)
{
	if (type === 'PROTOBUF')
		return compileProto(text);
	try { JSON.parse(text); }
	catch (e) { throw new HttpError(422, 42201, `Invalid schema: ${e.message}`); }
	return null;
}

function schemaBody(id, extra)
{
	const s = schemas[id - 1];
	const body = Object.assign({}, extra, { id, schema: s.schema });
	// Confluent leaves schemaType out for Avro
	if (s.type !== 'AVRO')
		body.schemaType = s.type;
	if (s.references.length)
		body.references = s.references;
	return body;
}

function liveVersions(subject)
{
	const versions = (subjects.get(subject) || []).filter(v => !v.deleted);
	if (!versions.length)
		throw new HttpError(404, 40401, `Subject '${subject}' not found.`);
	return versions;
}

function findVersion(subject, version)
{
	const versions = liveVersions(subject);
	const v = version === 'latest' ? versions[versions.length - 1]
		: versions.find(x => String(x.version) === version);
	if (!v)
		throw new HttpError(404, 40402, `Version ${version} not found.`);
	return v;
}

function sameSchema(body)
{
	const type = body.schemaType || 'AVRO';
	const references = body.references || [];
	const i = schemas.findIndex(s => s.type === type && s.schema === body.schema
		&& JSON.stringify(s.references) === JSON.stringify(references));
	return { type, references, id: i + 1 };
}

function register(subject, body)
{
	if (typeof body.schema !== 'string')
		throw new HttpError(422, 42201, 'Invalid schema: no schema text');
	let { type, references, id } = sameSchema(body);
	if (!id)
	{
		const serialized = checkSchema(type, body.schema);
		schemas.push({ type, schema: body.schema, references, serialized });
		id = schemas.length;
	}
	const versions = subjects.get(subject) || [];
	subjects.set(subject, versions);
	if (!versions.some(v => v.id === id && !v.deleted))
		versions.push({ version: versions.length + 1, id, deleted: false });
	return { id };
}

function lookup(subject, body)
{
	const { id } = sameSchema(body);
	const v = liveVersions(subject).find(x => x.id === id);
	if (!v)
		throw new HttpError(404, 40403, 'Schema not found');
	return schemaBody(id, { subject, version: v.version });
}

function byId(id, query)
{
	const s = schemas[id - 1];
	if (!s)
		throw new HttpError(404, 40403, `Schema ${id} not found`);
	const body = schemaBody(id);
	delete body.id;
	if (query.get('format') === 'serialized' && s.serialized)
		body.schema = s.serialized;
	return body;
}

// The Confluent calls, by method and path; the body parsed from JSON.
function route(method, url, body)
{
	const p = url.pathname.split('/').slice(1).map(decodeURIComponent);
	if (method === 'GET' && url.pathname === '/subjects')
		return [...subjects.keys()].filter(s => subjects.get(s).some(v => !v.deleted));
	if (method === 'GET' && url.pathname === '/config')
		return { compatibilityLevel: 'NONE' };
	if (p[0] === 'schemas' && p[1] === 'ids' && p.length === 3 && method === 'GET')
		return byId(Number(p[2]), url.searchParams);
	if (p[0] === 'schemas' && p[1] === 'ids' && p[3] === 'versions' && method === 'GET')
	{
		const out = [];
		for (const [subject, versions] of subjects)
			for (const v of versions)
				if (v.id === Number(p[2]) && !v.deleted)
					out.push({ subject, version: v.version });
		return out;
	}
	if (p[0] !== 'subjects' || p.length < 2)
		throw new HttpError(404, 404, 'HTTP 404 Not Found');
	const subject = p[1];
	if (p.length === 2 && method === 'POST')
		return lookup(subject, body);
	if (p.length === 2 && method === 'DELETE')
		return liveVersions(subject).map(v => { v.deleted = true; return v.version; });
	if (p[2] !== 'versions')
		throw new HttpError(404, 404, 'HTTP 404 Not Found');
	if (p.length === 3 && method === 'POST')
		return register(subject, body);
	if (p.length === 3 && method === 'GET')
		return liveVersions(subject).map(v => v.version);
	if (p.length === 4 && method === 'GET')
	{
		const v = findVersion(subject, p[3]);
		return schemaBody(v.id, { subject, version: v.version });
	}
	if (p.length === 4 && method === 'DELETE')
	{
		const v = findVersion(subject, p[3]);
		v.deleted = true;
		return v.version;
	}
	throw new HttpError(405, 405, 'HTTP 405 Method Not Allowed');
}

// none, basic:USER or bearer when the credentials match, bad otherwise
function authOf(req)
{
	const h = req.headers.authorization || '';
	let m = h.match(/^Basic (.+)$/i);
	if (m)
	{
		const userPass = Buffer.from(m[1], 'base64').toString();
		return opts.user && userPass === opts.user ? 'basic:' + userPass.split(':')[0] : 'bad';
	}
	m = h.match(/^Bearer (.+)$/i);
	if (m)
		return opts.token && m[1] === opts.token ? 'bearer' : 'bad';
	return h ? 'bad' : 'none';
}

function answer(res, status, body)
{
	const text = JSON.stringify(body);
	res.writeHead(status, { 'Content-Type': CONTENT_TYPE, 'Content-Length': Buffer.byteLength(text) });
	res.end(text);
}

function handle(req, res, text)
{
	const url = new URL(req.url, 'http://stub');
	const auth = authOf(req);
	const entry = { method: req.method, path: url.pathname + url.search, auth, status: 0 };
	requests.push(entry);
	let status = 200, body;
	const line = `${req.method} ${url.pathname}`;
	const failure = failures.find(f => f.match.test(line) && f.times !== 0);
	try
	{
		if ((opts.user || opts.token) && (auth === 'none' || auth === 'bad'))
			throw new HttpError(401, 40101, 'Unauthorized');
		if (failure)
		{
			if (failure.times > 0)
				failure.times--;
			throw new HttpError(failure.status, failure.status * 100 + 1, 'injected failure');
		}
		let parsed = {};
		if (text.length)
		{
			try { parsed = JSON.parse(text); }
			catch (e) { throw new HttpError(400, 400, 'Unrecognized request body'); }
		}
		body = route(req.method, url, parsed);
	}
	catch (e)
	{
		if (!(e instanceof HttpError))
			e = new HttpError(500, 50001, String(e.stack || e));
		status = e.status;
		body = { error_code: e.code, message: e.message };
	}
	entry.status = status;
	setTimeout(() => answer(res, status, body), slowMs);
}

function readBody(req, done)
{
	const chunks = [];
	req.on('data', c => chunks.push(c));
	req.on('end', () => done(Buffer.concat(chunks).toString()));
}

const sockets = new Set();
const registry = (opts.cert ? https.createServer({ cert: fs.readFileSync(opts.cert),
	key: fs.readFileSync(opts.key) }) : http.createServer());
registry.on('request', (req, res) => readBody(req, text => handle(req, res, text)));
registry.on(opts.cert ? 'secureConnection' : 'connection', s => {
	sockets.add(s);
	s.on('close', () => sockets.delete(s));
});
let registryPort = Number(opts.port || 0);

function down()
{
	registry.close();
	for (const s of sockets)
		s.destroy();
}

const control = http.createServer((req, res) => readBody(req, text => {
	const cmd = `${req.method} ${req.url}`;
	const body = text ? JSON.parse(text) : {};
	if (cmd === 'POST /down')
		down();
	else if (cmd === 'POST /up')
		registry.listening || registry.listen(registryPort, '127.0.0.1');
	else if (cmd === 'POST /fail')
		failures.unshift({ status: body.status || 503, match: new RegExp(body.match || ''),
			times: body.times === undefined ? -1 : body.times });
	else if (cmd === 'DELETE /fail')
		failures.length = 0;
	else if (cmd === 'POST /slow')
		slowMs = body.ms || 0;
	else if (cmd === 'GET /requests')
		return answer(res, 200, requests);
	else if (cmd === 'DELETE /requests')
		requests = [];
	else
		return answer(res, 404, { message: 'unknown control ' + cmd });
	answer(res, 200, { ok: true });
}));

registry.listen(registryPort, '127.0.0.1', () => {
	registryPort = registry.address().port;
	control.listen(0, '127.0.0.1', () => {
		const scheme = opts.cert ? 'https' : 'http';
		process.stdout.write(`REGISTRY ${scheme}://127.0.0.1:${registryPort}`
			+ ` CONTROL http://127.0.0.1:${control.address().port}\n`);
	});
});

function stop() { process.exit(0); }
process.on('SIGTERM', stop);
process.stdin.on('end', stop);
process.stdin.on('error', stop);
process.stdin.resume();
