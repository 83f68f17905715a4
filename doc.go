// Package salvage makes long-running, multi-step agent pipelines finish
// anyway, on NATS JetStream: a job is split into chunks on a work queue,
// every call an agent makes is journaled and retried (tier 1: backoff with
// full jitter inside the worker; tier 2: JetStream redelivery), claims and
// checkpoints fence out stale workers, a replay never repeats a side
// effect, and what cannot finish becomes a typed failure envelope that a
// recovery orchestrator resumes, compensates, verifies or escalates.
//
// A program defines its Pipelines — how input splits into chunks, the
// Stages each chunk runs, the Agents in a stage and the Tools they call —
// and runs them with a Client:
//
//	client, err := salvage.NewClient(js, &salvage.Config{Pipelines: []*salvage.Pipeline{greet}})
//	err = client.Start(ctx)        // provisions streams and buckets, runs the roles
//	id, err := client.JobSubmit(ctx, "greet", input, nil)
//	job, err := client.JobWait(ctx, id) // job.Status == salvage.JobDone
//	err = client.Stop(ctx)         // drains: in-flight chunks finish or are released
//
// Every setting lives in Config, each with its default in its comment; a
// zero Config runs the worker, dead-letter and recovery roles with every
// default. Any number of clients, in any number of processes, may share
// one deployment; a Client that only submits and waits needs no
// pipelines and no Start.
//
// An agent calls tools through its Turn (Turn.Tool): the call is journaled
// under a deterministic idempotency key (ToolCall.IdempotencyKey), retried
// by tier 1 when its error says so (Transient, RateLimited, Timeout; never
// Permanent), and answered from the journal when a resumed chunk replays
// the agent. A Tool with a SideEffect declares how to Verify an unknown
// outcome and, if Reversible, which tool compensates it. A panic in an
// agent, tool, split or result function fails only its chunk (class
// panic, with the stack).
//
// Optional integrations live apart, so that a program pays only for what
// it imports: chatmodel (model tools over HTTP), otelsalvage (OTLP span
// export); natsconf starts an embedded server; salvagetype defines the
// contract's words once (statuses, categories, strategies: JobRunning is
// salvagetype.JobRunning, whose methods Finished, Terminal, Final, Open
// and Outcome it documents); salvagetest is the test
// kit (a real embedded JetStream server per test, a started client, a
// wait for a job, one agent run against its tools).
//
// The Client's methods are named noun first, then verb (JobSubmit, JobGet,
// ChunkList, EnvelopeReplay, PipelinePause, LimitSet, JobWatch), so those
// on one record sort together; Start, Stop, Provision and Health act on
// the client itself. The operator's side — JobCancel, EnvelopeList,
// EnvelopeGet, EnvelopeReplay, EnvelopeResolve, EnvelopeAck — is the same implementation the
// micro service (RoleAPI, salvage.api.*) and the salvage CLI use. The
// subjects, streams, buckets, headers, statuses and limits users depend on
// are listed in the repository's README and, in full, docs/contract.md.
package salvage
