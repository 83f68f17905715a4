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
//   NATS_URL       the server (default nats://127.0.0.1:4222)
//   AGENT_SUBJECT  the subject to serve (default agents.summarize)
//   AGENT_DELAY_MS how long each turn takes (default 0)
//   AGENT_LOG      a file to append "answered <idempotency key>" to
import { appendFileSync } from "node:fs";
import { connect } from "@nats-io/transport-node";
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

async function answer(msg: ServiceMsg): Promise<void> {
  const key = msg.headers?.get("Salvage-Idempotency-Key") ?? "";
  let req: ServiceRequest;
  try {
    req = msg.json<ServiceRequest>();
  } catch {
    msg.respondError(400, "the body is not JSON");
    return;
  }
  if (typeof req.input !== "string") {
    msg.respondError(400, "want a string of text as input");
    return;
  }
  if (delay > 0) {
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
  const out = { ...summarize(req.input), chunk: req.chunk, agent: req.agent, prior: req.prior?.length ?? 0 };
  msg.respond(JSON.stringify(out));
  if (log) {
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
