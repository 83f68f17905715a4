// A Salvage agent in TypeScript: a NATS micro service that answers agent
// turns on a subject. Salvage sends each turn as a request:
//
//   body     {"job", "chunk", "stage", "agent", "seq", "input", "prior"}
//   headers  Salvage-Idempotency-Key, traceparent, Salvage-Deadline
//
// The reply body is the agent's output (JSON). An error reply carries
// Nats-Service-Error-Code: 4xx is permanent, 429/503/5xx are retried
// (with Retry-After, if set). Salvage journals every answered turn, so a
// resumed chunk never asks again for one that was answered.
//
// The contract a service keeps in return: it never acts on a request
// after its Salvage-Deadline (Salvage has stopped waiting and may ask
// again), and an error reply says Salvage-Outcome: not-applied when it
// did nothing, so a side effect is asked again without a verify. This
// agent has no side effect, but keeps the contract as a tool would.
//
//   NATS_URL       the server (default nats://127.0.0.1:4222)
//   AGENT_SUBJECT  the subject to serve (default agents.summarize)
//   AGENT_DELAY_MS how long each turn takes (default 0)
//   AGENT_LOG      a file to append "asked <idempotency key>" to when a turn arrives, and
//                  "answered <idempotency key>" once its answer is flushed
import { appendFileSync } from "node:fs";
import { connect, headers } from "@nats-io/transport-node";
import { Svcm } from "@nats-io/services";
import type { ServiceMsg } from "@nats-io/services";

interface StageOutput {
  stage: number;
  agent: string;
  output: unknown;
}

interface ServiceRequest {
  job: string;
  chunk: number;
  stage: number;
  agent: string;
  seq: number;
  input: unknown;
  prior?: StageOutput[];
}

const servers = process.env.NATS_URL ?? "nats://127.0.0.1:4222";
const subject = process.env.AGENT_SUBJECT ?? "agents.summarize";
const delay = Number(process.env.AGENT_DELAY_MS ?? "0");
const log = process.env.AGENT_LOG;

// summarize is the agent's work: a word count and the first words of a
// text. A real agent would call a model here.
function summarize(text: string): { words: number; summary: string } {
  const words = text.split(/\s+/).filter((w) => w.length > 0);
  return { words: words.length, summary: words.slice(0, 6).join(" ") };
}

// refuse answers an error that says nothing was done.
function refuse(msg: ServiceMsg, code: number, why: string): void {
  const h = headers();
  h.set("Salvage-Outcome", "not-applied");
  msg.respondError(code, why, undefined, { headers: h });
}

// pastDeadline reports whether Salvage has stopped waiting for msg: then
// nothing may be done for it any more.
function pastDeadline(msg: ServiceMsg): boolean {
  const deadline = Date.parse(msg.headers?.get("Salvage-Deadline") ?? "");
  return !Number.isNaN(deadline) && Date.now() >= deadline;
}

async function answer(msg: ServiceMsg): Promise<void> {
  const key = msg.headers?.get("Salvage-Idempotency-Key") ?? "";
  if (log) {
    appendFileSync(log, `asked ${key}\n`);
  }
  let req: ServiceRequest;
  try {
    req = msg.json<ServiceRequest>();
  } catch {
    refuse(msg, 400, "the body is not JSON");
    return;
  }
  if (typeof req.input !== "string") {
    refuse(msg, 400, "want a string of text as input");
    return;
  }
  if (delay > 0) {
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
  if (pastDeadline(msg)) {
    // Salvage has moved on: act on nothing, answer nothing it would read.
    return;
  }
  const out = { ...summarize(req.input), chunk: req.chunk, agent: req.agent, prior: req.prior?.length ?? 0 };
  msg.respond(JSON.stringify(out));
  if (log) {
    // The answer leaves this process before it is called given: a
    // respond is buffered, and a process killed before the flush never
    // sent it (Salvage then asks again, as it should).
    await nc.flush();
    appendFileSync(log, `answered ${key}\n`);
  }
}

const nc = await connect({ servers, name: "salvage-agent-ts" });
const service = await new Svcm(nc).add({
  name: "agent-ts",
  version: "1.0.0",
  description: "Summarizes paragraphs for Salvage",
});
service.addEndpoint("summarize", {
  subject,
  handler: (err, msg) => {
    if (err) {
      console.error(err);
      return;
    }
    void answer(msg);
  },
});
console.log(`serving ${subject} on ${servers}`);
