package salvage

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/salvagehq/salvage/recovery"
	"github.com/salvagehq/salvage/salvagetype"
	"github.com/salvagehq/salvage/streams"
)

// ServiceTimeoutDefault bounds one request to an agent or tool served on
// a NATS subject.
const ServiceTimeoutDefault = 30 * time.Second

// Headers of a request to an agent or tool served on a NATS subject, and
// of its reply.
const (
	// HeaderIdempotencyKey carries the call's idempotency key: the same on
	// every retry, redelivery and resume of the call.
	HeaderIdempotencyKey = "Salvage-Idempotency-Key"
	// HeaderDeadline is the moment after which the service must not apply
	// the request (RFC 3339): a request still unapplied then is refused,
	// never applied late. Salvage waits for an answer a little longer
	// (DeadlineGrace) and, with no answer, verifies a side effect before
	// it asks again.
	HeaderDeadline = "Salvage-Deadline"
	// HeaderOutcome, on an error reply, says what became of the request:
	// OutcomeNotApplied (nothing was done: a side effect is asked again
	// without a verify) or OutcomeUnknown (it may have been applied: it is
	// verified first). Without it a 5xx, 408 or 409 is unknown and any
	// other 4xx, 429 and 529 are not applied.
	HeaderOutcome = "Salvage-Outcome"
	// HeaderResourceID, on a reply, names what a side effect created or
	// changed (a charge, a ticket): it is journaled in the effect's
	// fingerprint, passed to its compensation, and shown to a person when
	// the effect is left standing.
	HeaderResourceID = "Salvage-Resource-Id"
	// HeaderRetryAfter, on an error reply, asks for a wait before the
	// next attempt: seconds, or an HTTP date.
	HeaderRetryAfter = "Retry-After"
	// HeaderModel, HeaderPromptTokens and HeaderCompletionTokens, on a
	// reply, report what a model call spent; they are journaled as the
	// call's usage.
	HeaderModel            = "Salvage-Model"
	HeaderPromptTokens     = "Salvage-Prompt-Tokens"
	HeaderCompletionTokens = "Salvage-Completion-Tokens"
)

// Values of HeaderOutcome.
const (
	OutcomeNotApplied = "not-applied"
	OutcomeUnknown    = "unknown"
)

// DeadlineGrace is how long Salvage goes on waiting for an answer after
// the Salvage-Deadline it sent: a tenth of the timeout, at most a second.
// A service that checked the deadline just before it applied a request has
// that long to answer before Salvage verifies and may ask again.
func DeadlineGrace(timeout time.Duration) time.Duration {
	return min(timeout/10, time.Second)
}

// ServiceRequest is the body of a request to an agent or tool served on a
// NATS subject. Prior, the earlier stages' outputs, is sent to agents.
type ServiceRequest struct {
	Job   string          `json:"job"`
	Chunk int             `json:"chunk"`
	Stage int             `json:"stage"`
	Agent string          `json:"agent"`
	Seq   int             `json:"seq"`
	Input json.RawMessage `json:"input"`
	Prior []StageOutput   `json:"prior,omitempty"`
}

// VerifyRequest is the body of a request to a side effect's
// VerifySubject; VerifyReply is the answer.
type VerifyRequest struct {
	Key string `json:"idempotency_key"`
}

// VerifyReply answers a VerifyRequest: whether the call with that key took
// effect, the id the system gave it, and its output.
type VerifyReply struct {
	Applied    bool            `json:"applied"`
	ResourceID string          `json:"resource_id,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
}

// agentTurn is the journaled input of an agent served on a subject.
type agentTurn struct {
	Input json.RawMessage `json:"input"`
	Prior []StageOutput   `json:"prior,omitempty"`
}

// remoteAgentTool names the tool through which an agent served on subject
// is called: one per subject, shared by the agents it serves.
func remoteAgentTool(subject string) string { return "agent:" + subject }

// SystemName turns s — a subject, a host name — into a breaker system
// name (Tool.System): every byte a system name cannot hold (".", and
// anything but A-Z a-z 0-9 - _ =) becomes "_", cut to MaxTokenLen bytes.
// A tool or agent served on a subject is in the system SystemName(subject)
// unless it names one.
func SystemName(s string) string {
	out := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '=':
			return r
		}
		return '_'
	}, s)
	if len(out) > salvagetype.MaxTokenLen {
		out = out[:salvagetype.MaxTokenLen]
	}
	return out
}

// ValidateSubject checks the subject an agent, a tool or a verification
// is served on. It refuses, with an error wrapping ErrInvalidConfig, a
// subject a request cannot be sent to or must not be: a wildcard, the server's own API ($JS, $KV, $SYS, … — every
// subject starting with $), another connection's replies (_INBOX…), or
// Salvage's own subjects (salvage.…), which a worker may publish to and a
// pipeline must not turn into an operator's action.
func ValidateSubject(what, subject string) error {
	if subject == "" || strings.ContainsAny(subject, " \t\r\n*>") || strings.HasPrefix(subject, ".") ||
		strings.HasSuffix(subject, ".") || strings.Contains(subject, "..") {
		return fmt.Errorf("%w: %s subject %q: want tokens separated by dots, no wildcards or spaces", ErrInvalidConfig, what, subject)
	}
	first, _, _ := strings.Cut(subject, ".")
	switch {
	case strings.HasPrefix(first, "$"):
		return fmt.Errorf("%w: %s subject %q: subjects starting with $ are the server's own API", ErrInvalidConfig, what, subject)
	case strings.HasPrefix(first, "_INBOX"):
		return fmt.Errorf("%w: %s subject %q: subjects starting with _INBOX carry replies", ErrInvalidConfig, what, subject)
	case first == "salvage":
		return fmt.Errorf("%w: %s subject %q: subjects under salvage. are Salvage's own", ErrInvalidConfig, what, subject)
	}
	return nil
}

// remote calls agents and tools served on NATS subjects.
type remote struct {
	nc *nats.Conn
}

// call sends one request for c to subject and classifies the outcome.
// An agent's turn (turn true) unwraps its journaled input into input and
// prior.
func (r remote) call(ctx context.Context, subject string, timeout time.Duration, c ToolCall, turn bool) (ToolResult, error) {
	req := ServiceRequest{Job: c.Job, Chunk: c.Chunk, Stage: c.Stage, Agent: c.Agent, Seq: c.Seq, Input: c.Input}
	if turn {
		var t agentTurn
		if err := json.Unmarshal(c.Input, &t); err != nil {
			return ToolResult{}, Permanent(400, fmt.Errorf("agent turn input: %w", err))
		}
		req.Input, req.Prior = t.Input, t.Prior
	}
	body, err := json.Marshal(req)
	if err != nil {
		return ToolResult{}, Permanent(400, err)
	}
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(HeaderIdempotencyKey, c.IdempotencyKey)
	if c.TraceID != "" {
		m.Header.Set(salvagetype.HeaderTraceParent, streams.TraceParent(c.TraceID, streams.DeriveSpanID(c.IdempotencyKey)))
	}
	reply, err := r.request(ctx, m, timeout)
	if err != nil {
		return ToolResult{}, err
	}
	out := ToolResult{Output: asJSON(reply.Data), ResourceID: clip(reply.Header.Get(HeaderResourceID), 512)}
	usage, err := replyUsage(subject, reply.Header)
	if err != nil {
		return ToolResult{}, err
	}
	out.Usage = usage
	return out, nil
}

// replyUsage reads the usage headers of a reply: none, or two counts of
// tokens within 0..UsageTokensMax. Anything else breaks the contract: a
// permanent failure (status 502) wrapping ErrBadUsage, never a count.
func replyUsage(subject string, h nats.Header) (*Usage, error) {
	prompt, completion := h.Get(HeaderPromptTokens), h.Get(HeaderCompletionTokens)
	if prompt == "" && completion == "" {
		return nil, nil
	}
	p, perr := strconv.ParseInt(cmp.Or(prompt, "0"), 10, 64)
	c, cerr := strconv.ParseInt(cmp.Or(completion, "0"), 10, 64)
	u := &Usage{Model: clip(h.Get(HeaderModel), 256), PromptTokens: p, CompletionTokens: c}
	if perr != nil || cerr != nil {
		return nil, Permanent(502, fmt.Errorf("%w: %s answered %s %q, %s %q: want whole numbers", ErrBadUsage, subject, HeaderPromptTokens, clip(prompt, 40), HeaderCompletionTokens, clip(completion, 40)))
	}
	if err := recovery.ValidUsage((*salvagetype.Usage)(u)); err != nil {
		return nil, Permanent(502, fmt.Errorf("%s: %w", subject, err))
	}
	return u, nil
}

// verify asks subject whether the call with key took effect.
func (r remote) verify(ctx context.Context, subject string, timeout time.Duration, key string) (Verification, error) {
	body, _ := json.Marshal(VerifyRequest{Key: key})
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(HeaderIdempotencyKey, key)
	reply, err := r.request(ctx, m, timeout)
	if err != nil {
		return Verification{}, err
	}
	var v VerifyReply
	if err := json.Unmarshal(reply.Data, &v); err != nil {
		return Verification{}, Permanent(0, fmt.Errorf("verify reply from %s is not {\"applied\", ...}: %w", subject, err))
	}
	return Verification(v), nil
}

// request sends m and waits up to timeout. No responders is transient
// (the service may be restarting); no answer in time is a timeout (the
// outcome is unknown); an error reply is classified by its code.
func (r remote) request(ctx context.Context, m *nats.Msg, timeout time.Duration) (*nats.Msg, error) {
	attempt, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := attempt.Deadline()
	// The service must not apply the request after the deadline it is
	// told; Salvage waits the grace beyond it for the answer.
	m.Header.Set(HeaderDeadline, deadline.Add(-DeadlineGrace(timeout)).UTC().Format(time.RFC3339Nano))
	reply, err := r.nc.RequestMsgWithContext(attempt, m)
	switch {
	case err == nil:
		return reply, serviceError(m.Subject, reply)
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, nats.ErrNoResponders):
		// Nobody received it: nothing can have been applied.
		return nil, salvagetype.NotApplied(Transient(503, fmt.Errorf("no service answers on %s", m.Subject)))
	case attempt.Err() != nil || errors.Is(err, nats.ErrTimeout):
		return nil, Timeout(fmt.Errorf("no answer on %s within %s", m.Subject, timeout))
	default:
		return nil, Transient(0, fmt.Errorf("request on %s: %w", m.Subject, err))
	}
}

// serviceError reads an error reply: Nats-Service-Error-Code 4xx is
// permanent (429 rate-limited, 408 and 409 transient), 5xx and anything
// else transient; Retry-After is honoured. Salvage-Outcome, when set, says
// whether a side effect may have been applied (see HeaderOutcome).
func serviceError(subject string, reply *nats.Msg) error {
	err := classifyReply(subject, reply)
	switch reply.Header.Get(HeaderOutcome) {
	case OutcomeNotApplied:
		return salvagetype.NotApplied(err)
	case OutcomeUnknown:
		if !recovery.OutcomeUnknown(err) {
			// A refusal the service itself cannot vouch for: treated as
			// a 5xx of the same class, which is verified.
			var ce *salvagetype.CallError
			if errors.As(err, &ce) {
				c := *ce
				c.Status = http.StatusBadGateway
				return &c
			}
		}
	}
	return err
}

// classifyReply classifies an error reply by its code alone.
func classifyReply(subject string, reply *nats.Msg) error {
	code := reply.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return nil
	}
	status, _ := strconv.Atoi(code)
	cause := fmt.Errorf("%s answered %s: %s", subject, code, clip(reply.Header.Get(micro.ErrorHeader), 300))
	after, hasAfter := RetryAfter(http.Header(reply.Header), time.Now())
	switch {
	case (status == http.StatusTooManyRequests || status == 529) && hasAfter:
		if status == 529 {
			return Overloaded(after, cause)
		}
		return RateLimited(after, cause)
	case status >= 400 && status < 500 && status != http.StatusTooManyRequests && status != http.StatusRequestTimeout && status != http.StatusConflict:
		return Permanent(status, cause)
	default:
		return Transient(status, cause)
	}
}

// asJSON keeps a JSON reply as it is and makes any other text a JSON
// string, so a reply from `nats reply --command` is an output too.
func asJSON(data []byte) json.RawMessage {
	if json.Valid(data) {
		return json.RawMessage(append([]byte(nil), data...))
	}
	out, _ := json.Marshal(strings.TrimRight(string(data), "\n"))
	return out
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
