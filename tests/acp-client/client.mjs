// An ACP client Troupe did not write: the official TypeScript SDK's ClientSideConnection
// (@agentclientprotocol/sdk, pinned in package.json), driving `troupe acp` as an editor such as
// Zed would. tests/it/acp_door.rs runs it; it prints one JSON report on stdout and the Rust test
// checks it. Usage: node client.mjs <scenario>, with TROUPE_BIN, TROUPE_DATA (the data dir),
// TROUPE_PROJECT (the session's cwd), TROUPE_TARGET (the party or agent a scenario names) and
// TROUPE_RUNTIME_DIR in the environment.
//   party  initialize, session/new, commands advertised, a prompt that launches the project's
//          default party (its permission request answered here), then a new connection:
//          session/list and session/load (the replay);
//   elsewhere  the same prompt, its forwarded request decided from another door (the CLI) while
//          the editor holds it: the door withdraws it;
//   agent  a prompt of `/agent <TROUPE_TARGET> …` (one run, its request answered here);
//   words  the same from an editor that fills in forms: an agent's free-text questions come as
//          `elicitation/create`, one answered here, one from the CLI meanwhile (withdrawn);
//   cancel a prompt of `/party <TROUPE_TARGET> …`, cancelled after its first plan update;
//   leave  the same prompt, then the connection closed under it; another connection loads the
//          session (the replay, then the party followed live) and cancels it;
//   team   one request (TROUPE_TASK) to the project's team, every permission approved once,
//          every form declined (see `team` below);
//   raw    malformed and out-of-order messages written by hand (no SDK): a line that is not
//          JSON, an unknown method, a prompt before any session, a second prompt while one runs.
import { execFileSync, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const env = process.env;
const scenario = process.argv[2];

function troupe() {
    return spawn(env.TROUPE_BIN, ["--data-dir", env.TROUPE_DATA, "acp"], {
        stdio: ["pipe", "pipe", "inherit"],
        env,
    });
}

/// A connection through the SDK; records every update, permission request and form (`fill`
/// answers forms; without it the client does not offer to fill them in).
function connect(answer, fill) {
    const child = troupe();
    const seen = { updates: [], asks: [], forms: [] };
    const waiters = [];
    const client = {
        async sessionUpdate(params) {
            seen.updates.push(params);
            for (const w of waiters.splice(0)) w();
        },
        async requestPermission(params) {
            seen.asks.push(params);
            for (const w of waiters.splice(0)) w();
            return answer(params);
        },
        async readTextFile() {
            throw acp.RequestError.methodNotFound("fs/read_text_file");
        },
        async writeTextFile() {
            throw acp.RequestError.methodNotFound("fs/write_text_file");
        },
    };
    if (fill) {
        client.createElicitation = async (params) => {
            seen.forms.push(params);
            for (const w of waiters.splice(0)) w();
            return fill(params);
        };
    }
    const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
    const conn = new acp.ClientSideConnection(() => client, stream);
    /// Resolves once `pred` holds of what was seen.
    const until = async (pred) => {
        while (!pred(seen)) await new Promise((resolve) => waiters.push(resolve));
    };
    const close = () =>
        new Promise((resolve) => {
            child.on("exit", (code, signal) => resolve({ code, signal }));
            child.stdin.end();
        });
    return { child, conn, seen, until, close };
}

const kinds = (updates) => updates.map((u) => u.update.sessionUpdate);
const texts = (updates) =>
    updates
        .filter((u) => u.update.sessionUpdate.endsWith("_chunk") && u.update.content?.type === "text")
        .map((u) => `${u.update.sessionUpdate}: ${u.update.content.text}`);
/// The text a tool call update carries.
const callText = (u) =>
    u.update.sessionUpdate === "tool_call_update" ? u.update.content?.[0]?.content?.text : undefined;
const allowOnce = (params) => {
    const option = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: option.optionId } };
};

async function initialize(conn, forms = false) {
    return conn.initialize({
        protocolVersion: acp.PROTOCOL_VERSION,
        clientCapabilities: {
            fs: { readTextFile: false, writeTextFile: false },
            terminal: false,
            ...(forms ? { elicitation: { form: {} } } : {}),
        },
        clientInfo: { name: "troupe-test-client", version: "1.0.0" },
    });
}

async function party() {
    const a = connect(allowOnce);
    const init = await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    await a.until((s) => kinds(s.updates).includes("available_commands_update"));
    const commands = a.seen.updates
        .find((u) => u.update.sessionUpdate === "available_commands_update")
        .update.availableCommands.map((c) => c.name);
    const before = a.seen.updates.length;
    const prompt = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: "Write the notes" }],
    });
    const updates = a.seen.updates.slice(before);
    const exit = await a.close();

    // A new connection (the editor restarted): the session is listed and loads.
    const b = connect(allowOnce);
    await initialize(b.conn);
    const listed = await b.conn.listSessions({ cwd: env.TROUPE_PROJECT });
    await b.conn.loadSession({ sessionId, cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const replay = b.seen.updates.filter((u) => u.update.sessionUpdate !== "available_commands_update");
    await b.close();
    return {
        init,
        sessionId,
        commands,
        stopReason: prompt.stopReason,
        kinds: kinds(updates),
        texts: texts(updates),
        plans: updates.filter((u) => u.update.sessionUpdate === "plan").map((u) => u.update.entries),
        toolCalls: updates
            .filter((u) => u.update.sessionUpdate.startsWith("tool_call"))
            .map((u) => u.update),
        asks: a.seen.asks,
        exit,
        listed: listed.sessions,
        replayKinds: kinds(replay),
        replayTexts: texts(replay),
    };
}

/// The request forwarded to this editor is decided from another door (the CLI) instead.
async function elsewhere() {
    let seen = null;
    const a = connect(async (params) => {
        const approval = params.toolCall.toolCallId.replace(/^approval\//, "");
        execFileSync(env.TROUPE_BIN, ["--data-dir", env.TROUPE_DATA, "call", "decide_approval",
            JSON.stringify({ approval_id: approval, decision: "approve", decided_by: "cli" })], { env });
        // Withdrawn by the door once decided there: answer nothing meanwhile.
        await seen.until((s) => s.updates.some((u) => callText(u) === "Decided elsewhere."));
        return { outcome: { outcome: "cancelled" } };
    });
    seen = a;
    await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const { stopReason } = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: "Write the notes" }],
    });
    await a.close();
    const updates = a.seen.updates.filter((u) => u.update.sessionUpdate === "tool_call_update");
    return {
        sessionId,
        stopReason,
        asks: a.seen.asks.length,
        withdrawn: updates.map(callText),
        texts: texts(a.seen.updates),
    };
}

/// `/agent <TROUPE_TARGET> …`: one agent run, its request answered here.
async function agent() {
    const a = connect(allowOnce);
    await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const { stopReason } = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: `/agent ${env.TROUPE_TARGET} Write the notes` }],
    });
    await a.close();
    return { sessionId, stopReason, asks: a.seen.asks.length, texts: texts(a.seen.updates) };
}

/// A plain prompt (no slash command), as a new user's first one: in a project that names no
/// default it must start nothing.
async function bare() {
    const a = connect(allowOnce);
    await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const { stopReason } = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: "Fix the off-by-one bug in code.txt" }],
    });
    await a.close();
    return { sessionId, stopReason, asks: a.seen.asks.length, texts: texts(a.seen.updates) };
}

/// `/agent <TROUPE_TARGET> …` from an editor that fills in forms: an agent's questions in the
/// person's own words come as forms; the first is answered here, the second from another door
/// (the CLI) while this editor holds it, and the door withdraws it.
async function words() {
    let a = null;
    const a0 = connect(allowOnce, async (params) => {
        if (params.message.includes("Name the release?")) {
            return { action: "accept", content: { answer: "Aurora" } };
        }
        const isAsked = (u) =>
            u.update.sessionUpdate === "tool_call" && u.update.title?.includes("Anything else?");
        await a.until((s) => s.updates.some(isAsked));
        const asked = a.seen.updates.find(isAsked);
        const question = asked.update.toolCallId.replace(/^inbox\/question:/, "");
        execFileSync(env.TROUPE_BIN, ["--data-dir", env.TROUPE_DATA, "call", "answer_question",
            JSON.stringify({ question_id: question, answer: "all good", answered_by: "cli" })], { env });
        await a.until((s) => s.updates.some((u) => callText(u) === "Answered elsewhere."));
        return { action: "cancel" };
    });
    a = a0;
    await initialize(a.conn, true);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const { stopReason } = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: `/agent ${env.TROUPE_TARGET} Name it` }],
    });
    await a.close();
    return {
        sessionId,
        stopReason,
        forms: a.seen.forms,
        asks: a.seen.asks.length,
        results: a.seen.updates.map(callText).filter((t) => t !== undefined),
        texts: texts(a.seen.updates),
    };
}

async function cancel() {
    const a = connect(allowOnce);
    await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const turn = a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: `/party ${env.TROUPE_TARGET} wait for me` }],
    });
    await a.until((s) => kinds(s.updates).includes("plan"));
    await a.conn.cancel({ sessionId });
    const { stopReason } = await turn;
    await a.close();
    return { sessionId, stopReason, kinds: kinds(a.seen.updates), texts: texts(a.seen.updates) };
}

async function leave() {
    const a = connect(allowOnce);
    await initialize(a.conn);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const turn = a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: `/party ${env.TROUPE_TARGET} keep going` }],
    });
    // The turn never ends here: the connection closes under it.
    turn.catch(() => {});
    await a.until((s) => kinds(s.updates).includes("plan"));
    const exit = await a.close();

    // Another connection loads the session: the replay, then the party followed live, until
    // this editor cancels it.
    const b = connect(allowOnce);
    await initialize(b.conn);
    await b.conn.loadSession({ sessionId, cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const replayed = b.seen.updates.length;
    await b.conn.cancel({ sessionId });
    await b.until((s) => texts(s.updates).some((t) => t.includes("Party cancelled")));
    await b.close();
    return {
        sessionId,
        exit,
        replayKinds: kinds(b.seen.updates.slice(0, replayed)),
        liveTexts: texts(b.seen.updates.slice(replayed)),
    };
}

/// Hand-written lines: what the SDK would never send.
async function raw() {
    const child = troupe();
    const lines = createInterface({ input: child.stdout });
    const answers = new Map();
    const notes = [];
    let wake = () => {};
    lines.on("line", (line) => {
        const msg = JSON.parse(line);
        if (msg.id !== undefined && msg.method === undefined) answers.set(JSON.stringify(msg.id), msg);
        else notes.push(msg);
        wake();
    });
    const send = (msg) => child.stdin.write(typeof msg === "string" ? msg + "\n" : JSON.stringify(msg) + "\n");
    const answer = async (id) => {
        while (!answers.has(JSON.stringify(id))) await new Promise((resolve) => (wake = resolve));
        return answers.get(JSON.stringify(id));
    };
    const call = (id, method, params) => {
        send({ jsonrpc: "2.0", id, method, params });
        return answer(id);
    };
    const out = {};
    send("{this is not json");
    out.beforeInit = await call(1, "session/new", { cwd: env.TROUPE_PROJECT, mcpServers: [] });
    out.init = await call(2, "initialize", { protocolVersion: 1, clientCapabilities: {} });
    out.unknown = await call(9, "no/such_method", {});
    out.promptBeforeSession = await call(3, "session/prompt", {
        sessionId: "no-such-session",
        prompt: [{ type: "text", text: "hello" }],
    });
    out.badParams = await call(4, "session/new", { cwd: 42 });
    out.newSession = await call(5, "session/new", { cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const sessionId = out.newSession.result.sessionId;
    send({
        jsonrpc: "2.0",
        id: 6,
        method: "session/prompt",
        params: { sessionId, prompt: [{ type: "text", text: `/party ${env.TROUPE_TARGET} wait` }] },
    });
    // The first prompt has started once its plan is out.
    while (!notes.some((n) => n.params?.update?.sessionUpdate === "plan")) {
        await new Promise((resolve) => (wake = resolve));
    }
    out.secondPrompt = await call(7, "session/prompt", {
        sessionId,
        prompt: [{ type: "text", text: "again" }],
    });
    send({ jsonrpc: "2.0", method: "session/cancel", params: { sessionId } });
    out.firstPrompt = await answer(6);
    // Still serving.
    out.after = await call(8, "session/new", { cwd: env.TROUPE_PROJECT, mcpServers: [] });
    out.parseErrors = notes.filter((n) => n.error);
    for (const [, msg] of answers) if (msg.id === null) out.parseErrors.push(msg);
    child.stdin.end();
    out.exit = await new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));
    return out;
}

/// One request, as a person types it (TROUPE_TASK), to the project's own team: every permission
/// request approved here once (the person's approvals, through this client's own UI), every
/// form declined (the person is asked nothing else); the report says what was asked.
async function team() {
    const a = connect(allowOnce, async (params) => ({ action: "decline" }));
    await initialize(a.conn, true);
    const { sessionId } = await a.conn.newSession({ cwd: env.TROUPE_PROJECT, mcpServers: [] });
    const started = Date.now();
    const { stopReason } = await a.conn.prompt({
        sessionId,
        prompt: [{ type: "text", text: env.TROUPE_TASK }],
    });
    const ms = Date.now() - started;
    await a.close();
    return {
        sessionId,
        stopReason,
        ms,
        asks: a.seen.asks.map((p) => ({
            title: (p.toolCall.title ?? "").slice(0, 160),
            kinds: p.options.map((o) => o.kind),
        })),
        forms: a.seen.forms.map((f) => f.message),
        texts: texts(a.seen.updates),
    };
}

const scenarios = { party, elsewhere, agent, bare, words, cancel, leave, raw, team };
const run = scenarios[scenario];
if (!run) {
    console.error(`unknown scenario ${scenario}: ${Object.keys(scenarios).join(", ")}`);
    process.exit(2);
}
const report = await run();
// Exit once the report is written out (a pipe takes a large one in several writes).
process.stdout.write(JSON.stringify(report) + "\n", () => process.exit(0));
