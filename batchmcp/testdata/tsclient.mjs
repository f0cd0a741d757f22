// tsclient.mjs drives batchkit's MCP server with the official TypeScript
// SDK (npm @modelcontextprotocol/sdk), as a third-party client would. The
// Go test TestMCP_TypeScriptSDK runs it and checks what it prints.
//
// Env:
//   MCP_URL         the server's streamable HTTP endpoint (required)
//   MCP_KEY         the bearer key (required)
//   TARGETS         a JSON list of target URLs for the plain tool flow (required)
//   MAX_BYTES       optional max_bytes for the batch_result pages
//   TASK_TARGETS    optional: a JSON list of URLs submitted as a 2025-11-25
//                   task (client.experimental.tasks.callToolStream)
//   CANCEL_TARGETS  optional: a JSON list of URLs (that stay running)
//                   submitted as a task, then cancelled with tasks/cancel
//   TIMEOUT_MS      per-request timeout (default 90000; batch_status waits
//                   up to 30 s)
//
// The SDK is found as an ES module next to the script (a node_modules
// above it) or else through NODE_PATH, as CommonJS: an ESM import ignores
// NODE_PATH. It runs on node >= 18.
//
// On success it prints one JSON object to stdout (see report below) and
// "tsclient: ok" to stderr. Any failure: "tsclient: FAIL: ..." on stderr,
// exit 1.

import { createRequire } from 'node:module';

const TOOLS = ['batch_submit', 'batch_status', 'batch_result', 'batch_cancel'];
const TERMINAL = new Set(['done', 'partial', 'failed', 'cancelled']);

function fail(msg) {
  process.stderr.write(`tsclient: FAIL: ${msg}\n`);
  process.exit(1);
}

function env(name) {
  const v = process.env[name];
  if (!v) fail(`$${name} is not set`);
  return v;
}

// urls reads a JSON list of URL strings from $name; undefined if unset
// and optional.
function urls(name, optional) {
  const raw = process.env[name];
  if (!raw) {
    if (optional) return undefined;
    fail(`$${name} is not set`);
  }
  let list;
  try {
    list = JSON.parse(raw);
  } catch (e) {
    fail(`$${name} is not JSON: ${e.message}`);
  }
  if (!Array.isArray(list) || list.length === 0 || !list.every((t) => typeof t === 'string')) {
    fail(`$${name} must be a non-empty JSON list of URL strings`);
  }
  return list;
}

async function loadSDK() {
  try {
    const [{ Client }, { StreamableHTTPClientTransport }] = await Promise.all([
      import('@modelcontextprotocol/sdk/client/index.js'),
      import('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    ]);
    return { Client, StreamableHTTPClientTransport, how: 'esm' };
  } catch (e) {
    if (e?.code !== 'ERR_MODULE_NOT_FOUND') throw e;
  }
  const require = createRequire(import.meta.url);
  try {
    const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
    const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
    // The package's exports map ./package.json to dist/cjs/, so find the
    // package root from the client's path for the version.
    const main = require.resolve('@modelcontextprotocol/sdk/client/index.js');
    const root = main.slice(0, main.lastIndexOf('/dist/'));
    const { version } = require(root + '/package.json');
    return { Client, StreamableHTTPClientTransport, how: `NODE_PATH (cjs) ${root}, sdk ${version}` };
  } catch (e) {
    fail(`cannot load @modelcontextprotocol/sdk (NODE_PATH=${process.env.NODE_PATH ?? ''}): ${e.message}`);
  }
}

// call runs a tool and returns its structuredContent, which the SDK has
// checked against the tool's outputSchema; an isError result or a
// protocol error fails the run with the tool's text.
async function call(client, name, args, opts) {
  let res;
  try {
    res = await client.callTool({ name, arguments: args }, undefined, opts);
  } catch (e) {
    fail(`${name} ${JSON.stringify(args)}: ${e.message}`);
  }
  if (res.isError) {
    const text = (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join(' ');
    fail(`${name} ${JSON.stringify(args)} returned isError: ${text}`);
  }
  if (!res.structuredContent || typeof res.structuredContent !== 'object') {
    fail(`${name} returned no structuredContent: ${JSON.stringify(res)}`);
  }
  return res.structuredContent;
}

function submitArgs(list) {
  return { targets: list.map((u) => ({ url: u })) };
}

// taskCall submits list as a task and iterates the SDK's task stream:
// taskCreated, then tasks/get every pollInterval until the task is
// terminal, then tasks/result. onCreated runs when the task exists.
async function taskCall(client, list, opts, onCreated) {
  const out = { task_id: null, created_status: null, statuses: [], result: null, error: null };
  const stream = client.experimental.tasks.callToolStream(
    { name: 'batch_submit', arguments: submitArgs(list) },
    undefined,
    { ...opts, task: { ttl: 60000 } },
  );
  for await (const msg of stream) {
    switch (msg.type) {
      case 'taskCreated':
        out.task_id = msg.task.taskId;
        out.created_status = msg.task.status;
        out.created = msg.task;
        if (onCreated) await onCreated(msg.task);
        break;
      case 'taskStatus':
        out.statuses.push(msg.task.status);
        break;
      case 'result':
        out.result = msg.result;
        break;
      case 'error':
        out.error = msg.error?.message ?? String(msg.error);
        break;
    }
  }
  return out;
}

async function main() {
  const url = env('MCP_URL');
  const key = env('MCP_KEY');
  const targets = urls('TARGETS');
  const taskTargets = urls('TASK_TARGETS', true);
  const cancelTargets = urls('CANCEL_TARGETS', true);
  const maxBytes = process.env.MAX_BYTES ? Number(process.env.MAX_BYTES) : undefined;
  const timeout = Number(process.env.TIMEOUT_MS || 90000);
  const opts = { timeout };
  const report = {};

  const { Client, StreamableHTTPClientTransport, how } = await loadSDK();
  const client = new Client({ name: 'batchkit-tsclient', version: '1.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: 'Bearer ' + key } },
  });
  try {
    await client.connect(transport, opts);
  } catch (e) {
    fail(`connect ${url}: ${e.message}`);
  }
  report.protocol = transport.protocolVersion ?? null;
  report.server = client.getServerVersion() ?? null;
  report.capabilities = client.getServerCapabilities() ?? null;
  process.stderr.write(`tsclient: connected (sdk via ${how}), protocol ${report.protocol}, server ${JSON.stringify(report.server)}\n`);

  let tools;
  try {
    tools = (await client.listTools(undefined, opts)).tools;
  } catch (e) {
    fail(`tools/list: ${e.message}`);
  }
  report.tools = tools.map((t) => t.name);
  report.execution = Object.fromEntries(tools.map((t) => [t.name, t.execution ?? null]));
  const missing = TOOLS.filter((n) => !report.tools.includes(n));
  if (missing.length > 0) fail(`tools/list lacks ${missing.join(', ')} (has ${report.tools.join(', ') || 'none'})`);

  // The plain flow: submit, status with wait until finished, the content
  // of target 0 in pages.
  const sub = await call(client, 'batch_submit', submitArgs(targets), opts);
  const jobId = sub.job_id;
  if (typeof jobId !== 'string' || jobId === '') fail(`batch_submit: no job_id in ${JSON.stringify(sub)}`);
  report.submit = sub;

  let status = sub.status;
  let polls = 0;
  const deadline = Date.now() + 5 * 60 * 1000;
  for (;;) {
    const st = await call(client, 'batch_status', { job_id: jobId, wait_seconds: 30 }, opts);
    polls++;
    status = st.status;
    if (TERMINAL.has(status)) break;
    if (Date.now() > deadline) fail(`job ${jobId} not finished after 5 minutes (status ${status})`);
  }
  report.status = status;
  report.status_polls = polls;

  let content0 = '';
  let offset = 0;
  let pages = 0;
  for (;;) {
    if (++pages > 10000) fail('batch_result: more than 10000 pages');
    const args = { job_id: jobId, idx: 0, offset };
    if (maxBytes !== undefined) args.max_bytes = maxBytes;
    const r = await call(client, 'batch_result', args, opts);
    if (typeof r.content !== 'string') fail(`batch_result: no string content in ${JSON.stringify(r)}`);
    content0 += r.content;
    if (r.next_offset === undefined || r.next_offset === null) break;
    if (typeof r.next_offset !== 'number' || r.next_offset <= offset) {
      fail(`batch_result: next_offset ${JSON.stringify(r.next_offset)} does not move past ${offset}`);
    }
    offset = r.next_offset;
  }
  report.job_id = jobId;
  report.content0 = content0;
  report.pages = pages;
  process.stderr.write(`tsclient: job ${jobId} ${status} after ${polls} status call(s); target 0: ${content0.length} chars in ${pages} page(s)\n`);

  if (taskTargets || cancelTargets) {
    if (!client.experimental?.tasks?.callToolStream) {
      fail('this SDK has no client.experimental.tasks.callToolStream');
    }
  }

  // The 2025-11-25 task flow: batch_submit as a task, polled until it
  // completes, then its result (the job's status) from tasks/result.
  if (taskTargets) {
    const tk = await taskCall(client, taskTargets, opts);
    report.task = tk;
    process.stderr.write(
      `tsclient: task ${tk.task_id}: created ${tk.created_status}, then ${tk.statuses.join(', ')}; ` +
        `${tk.error ? 'error: ' + tk.error : 'result ' + JSON.stringify(tk.result?.structuredContent?.status)}\n`,
    );
  }

  // A task cancelled with tasks/cancel as soon as it exists: the SDK's
  // stream then sees it cancelled.
  if (cancelTargets) {
    let cancelled;
    const tk = await taskCall(client, cancelTargets, opts, async (task) => {
      try {
        cancelled = await client.experimental.tasks.cancelTask(task.taskId, opts);
      } catch (e) {
        cancelled = { error: e.message };
      }
    });
    tk.cancel = cancelled;
    try {
      tk.after = await client.experimental.tasks.getTask(tk.task_id, opts);
    } catch (e) {
      tk.after = { error: e.message };
    }
    report.cancel = tk;
    process.stderr.write(
      `tsclient: task ${tk.task_id}: tasks/cancel answered ${JSON.stringify(cancelled?.status ?? cancelled)}, ` +
        `then ${tk.statuses.join(', ')}; ${tk.error ?? ''}\n`,
    );
  }

  await client.close();
  process.stdout.write(JSON.stringify(report) + '\n');
  process.stderr.write('tsclient: ok\n');
}

main().catch((e) => fail(e?.stack ?? String(e)));
