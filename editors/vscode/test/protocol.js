// Protocol-tier test of `troupe lsp` with vscode-jsonrpc (the library VS Code's client is built
// on), against the real binary and a real daemon set up by tests/it/editors.rs: a worker's
// pending request arrives as a diagnostic with the four quick fixes, `troupe.list_agents` runs
// as a workspace command, the Approve fix's command decides the request and the diagnostic goes.
// Prints one JSON line of findings; the Rust side asserts on it.
'use strict';
const cp = require('child_process');
const path = require('path');
const rpc = require('vscode-jsonrpc/node');

const bin = process.env.TROUPE_BIN;
const root = process.env.TEST_ROOT;
const file = path.join(root, process.env.TEST_FILE_NAME);
const uri = 'file://' + file;

const child = cp.spawn(bin, ['lsp'], { stdio: ['pipe', 'pipe', 'inherit'] });
const conn = rpc.createMessageConnection(
  new rpc.StreamMessageReader(child.stdout),
  new rpc.StreamMessageWriter(child.stdin),
);
const findings = {};
const diagnostics = [];
let waiters = [];
conn.onNotification('textDocument/publishDiagnostics', (p) => {
  if (p.uri === uri) {
    diagnostics.push(p.diagnostics);
    waiters.forEach((w) => w());
  }
});
conn.onNotification('troupe/approvals', (p) => {
  findings.last_count = p.pending;
});
const progress = [];
conn.onRequest('window/workDoneProgress/create', (p) => {
  findings.progress_token = p.token;
  return null;
});
conn.onNotification('$/progress', (p) => {
  progress.push(p.value.kind);
  waiters.forEach((w) => w());
});
const shown = [];
conn.onNotification('window/showMessage', (p) => {
  shown.push(p.message);
  waiters.forEach((w) => w());
});
conn.onRequest(() => null);
conn.listen();

function until(pred, ms = 20000) {
  return new Promise((resolve, reject) => {
    const check = () => {
      if (pred()) {
        waiters = waiters.filter((w) => w !== check);
        resolve();
      }
    };
    waiters.push(check);
    check();
    setTimeout(() => reject(new Error('timed out')), ms);
  });
}

(async () => {
  const init = await conn.sendRequest('initialize', {
    processId: process.pid,
    rootUri: 'file://' + root,
    workspaceFolders: [{ uri: 'file://' + root, name: 'repo' }],
    capabilities: {},
  });
  findings.server = init.serverInfo;
  findings.has_list_agents = init.capabilities.executeCommandProvider.commands.includes('troupe.list_agents');
  conn.sendNotification('initialized', {});
  await until(() => diagnostics.some((d) => d.length > 0));
  const diag = diagnostics.find((d) => d.length > 0)[0];
  findings.diagnostic = { line: diag.range.start.line, source: diag.source, code: diag.code, message: diag.message };
  const actions = await conn.sendRequest('textDocument/codeAction', {
    textDocument: { uri },
    range: diag.range,
    context: { diagnostics: [diag] },
  });
  findings.actions = actions.map((a) => a.title);
  const lenses = await conn.sendRequest('textDocument/codeLens', { textDocument: { uri } });
  findings.lenses = lenses.length;
  const agents = await conn.sendRequest('workspace/executeCommand', { command: 'troupe.list_agents', arguments: [{}] });
  findings.runs = agents.runs.length;
  try {
    await conn.sendRequest('workspace/executeCommand', { command: 'troupe.no_such_thing', arguments: [] });
  } catch (e) {
    findings.unknown_command_error = e.message;
  }
  const approve = actions.find((a) => a.title === 'Troupe: Approve');
  const decided = await conn.sendRequest('workspace/executeCommand', approve.command);
  findings.decided = decided.approval.status;
  await until(() => diagnostics.length > 0 && diagnostics[diagnostics.length - 1].length === 0);
  findings.cleared = true;
  // A launched party reports $/progress until it ends.
  const launched = await conn.sendRequest('workspace/executeCommand', {
    command: 'troupe.launch_party',
    arguments: [{ name: process.env.TEST_PARTY }],
  });
  findings.launched = launched.party.status;
  await until(() => progress.includes('end'));
  findings.progress = [progress[0], progress[progress.length - 1]];
  // ... and its completion is shown as a message.
  await until(() => shown.some((m) => m.includes('quick-party completed')));
  findings.shown = shown.find((m) => m.includes('quick-party completed'));
  await conn.sendRequest('shutdown');
  conn.sendNotification('exit');
  console.log(JSON.stringify(findings));
  process.exit(0);
})().catch((e) => {
  console.log(JSON.stringify({ error: String(e), ...findings }));
  process.exit(1);
});
