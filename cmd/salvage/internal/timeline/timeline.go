// Package timeline merges what happened to one chunk — its calls, the
// earlier runs a replay replaced, its deliveries, holds, parks,
// approvals, compensations and outcome — into one list in time order,
// each entry saying what it means and, after a gap, what the gap was.
// `salvage trace` prints it and the dashboard's chunk timeline shows it.
package timeline

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/salvagehq/salvage"
)

// Entry kinds besides the chunk event kinds (salvage.Event*).
const (
	// KindCall is a journaled call, at the time it began.
	KindCall = "call"
	// KindEarlierRun is an earlier outcome of a call that a later run
	// replaced (a failure before a replay or a resume).
	KindEarlierRun = "earlier-run"
)

// Entry is one line of a chunk's timeline.
type Entry struct {
	At time.Time `json:"at"`
	// Offset is seconds since the chunk's first entry.
	Offset float64 `json:"offset_s"`
	// Kind is KindCall, KindEarlierRun or a chunk event kind.
	Kind  string `json:"kind"`
	Stage int    `json:"stage,omitempty"`
	Epoch int    `json:"epoch"`
	// Call is the call of a KindCall or KindEarlierRun entry (for an
	// earlier run, the call whose row replaced it); Event the event of
	// the others.
	Call  *salvage.Call       `json:"call,omitempty"`
	Event *salvage.ChunkEvent `json:"event,omitempty"`
	// Status is a call's status, or the earlier run's.
	Status string `json:"status,omitempty"`
	// Text says what happened and, for an event after a gap, what the
	// gap was; empty for a call that simply succeeded.
	Text string `json:"text,omitempty"`
	// Failed marks what went wrong: a call that did not succeed, an
	// earlier failed run, a dead-letter.
	Failed bool `json:"failed,omitempty"`
}

// Of returns chunk c's timeline, oldest first.
func Of(c salvage.TraceChunk) []Entry {
	out := make([]Entry, 0, len(c.Events)+len(c.Calls))
	var prev *salvage.ChunkEvent
	for i := range c.Events {
		ev := &c.Events[i]
		out = append(out, Entry{At: ev.At, Kind: string(ev.Kind), Stage: ev.Stage, Epoch: -1, Event: ev,
			Text: eventText(*ev, prev), Failed: ev.Kind == salvage.EventDeadLettered})
		prev = ev
	}
	for i := range c.Calls {
		r := &c.Calls[i]
		for _, h := range r.History {
			at := h.StartedAt
			if at.IsZero() {
				at = r.StartedAt
			}
			out = append(out, Entry{At: at, Kind: KindEarlierRun, Stage: r.Stage, Epoch: r.Epoch, Call: r, Status: string(h.Status), Failed: true,
				Text: earlierText(r.Tool, h)})
		}
		out = append(out, Entry{At: r.StartedAt, Kind: KindCall, Stage: r.Stage, Epoch: r.Epoch, Call: r, Status: string(r.Status),
			Text: callText(*r), Failed: callFailed(r.Status)})
	}
	// Events carry no epoch: the one of the call before them.
	sort.SliceStable(out, func(a, b int) bool { return out[a].At.Before(out[b].At) })
	epoch := c.Epoch
	for i := range out {
		if out[i].Kind == KindCall {
			epoch = out[i].Epoch
			break
		}
	}
	for i := range out {
		if out[i].Epoch < 0 {
			out[i].Epoch = epoch
		} else {
			epoch = out[i].Epoch
		}
		out[i].Offset = out[i].At.Sub(out[0].At).Seconds()
	}
	return out
}

// earlierText says what an earlier run of tool ended as.
func earlierText(tool string, h salvage.CallAttempt) string {
	s := fmt.Sprintf("earlier run of %s: %s", tool, strings.ToLower(string(h.Status)))
	if h.Status == salvage.CallInitiated {
		s = fmt.Sprintf("earlier run of %s began and never finished: its worker stopped mid-call", tool)
	}
	if h.Attempts > 0 {
		s += fmt.Sprintf(" after %d attempts", h.Attempts)
	}
	if h.Error != "" {
		s += ": " + h.Error
	}
	return s
}

// callFailed reports whether a call in status st went wrong.
func callFailed(st salvage.CallStatus) bool {
	return st == salvage.CallFailed || st == salvage.CallUnknown || st == salvage.CallInitiated || st == salvage.CallCancelled
}

// callText says what a call's row means beyond its columns.
func callText(r salvage.Call) string {
	var parts []string
	switch {
	case r.Status == salvage.CallUnknown:
		parts = append(parts, "outcome unknown: the next run asks "+orTool(r.System, r.Tool)+" before it calls again")
	case r.Status == salvage.CallInitiated:
		parts = append(parts, "began and never finished: its worker stopped mid-call; the next run verifies before it calls again")
	}
	if r.Verified {
		parts = append(parts, "verified: "+orTool(r.System, r.Tool)+" said an earlier attempt had taken effect, so it was not made again")
	}
	if r.Status == salvage.CallCompensated {
		parts = append(parts, "its effect was compensated later")
	}
	if r.Error != "" && callFailed(r.Status) {
		parts = append(parts, r.Error)
	}
	if u := r.Usage; u != nil {
		parts = append(parts, fmt.Sprintf("%s %d+%d tokens", u.Model, u.PromptTokens, u.CompletionTokens))
	}
	return strings.Join(parts, "; ")
}

func orTool(system, tool string) string {
	if system != "" {
		return system
	}
	return "the tool " + tool
}

// eventText says what one event means, given the event before it.
func eventText(x salvage.ChunkEvent, prev *salvage.ChunkEvent) string {
	switch x.Kind {
	case salvage.EventDelivered:
		s := fmt.Sprintf("delivery %d taken by %s at stage %d", x.Delivery, x.Worker, x.Stage)
		if prev == nil {
			return s
		}
		gap := x.At.Sub(prev.At).Round(100 * time.Millisecond)
		switch {
		case strings.HasPrefix(x.Detail, "taken over from "):
			// Handed back by the reaper once the holder's process
			// lease lapsed: a redelivery, but not AckWait's.
			s = fmt.Sprintf("delivery %d taken over by %s at stage %d — %s after the last event: %s; the reaper handed the chunk back to its pool before JetStream's AckWait",
				x.Delivery, x.Worker, x.Stage, gap, x.Detail)
		case prev.Kind == salvage.EventDelivered && prev.Delivery == x.Delivery:
			s = fmt.Sprintf("delivery %d taken over by %s at stage %d — %s after %s took it: that worker was killed, stopped or stalled, and %s took the chunk over once its claim's lease lapsed, before JetStream's AckWait",
				x.Delivery, x.Worker, x.Stage, gap, prev.Worker, x.Worker)
		case prev.Kind == salvage.EventDelivered:
			s += fmt.Sprintf(" — redelivered %s after delivery %d (%s) ended without a result: that worker was killed, stopped or stalled, and JetStream redelivered once its AckWait passed without a heartbeat",
				gap, prev.Delivery, prev.Worker)
		case prev.Kind == salvage.EventHeld:
			s += fmt.Sprintf(" — released %s after the hold, when the %s breaker let calls through", gap, prev.Detail)
		case prev.Kind == salvage.EventPaused:
			s += fmt.Sprintf(" — released %s after the park, when the pipeline resumed", gap)
		case prev.Kind == salvage.EventAwaitingApproval, prev.Kind == salvage.EventApproved:
			s += fmt.Sprintf(" — released %s after the park, when a person approved", gap)
		case prev.Kind == salvage.EventDeadLettered:
			s += fmt.Sprintf(" — %s after its envelope %s: a recovery or a replay re-ran it", gap, prev.Detail)
		}
		return s
	case salvage.EventHeld:
		return fmt.Sprintf("held at stage %d: the %s breaker is open; the chunk waits on SALVAGE_HOLD, no delivery spent", x.Stage, x.Detail)
	case salvage.EventPaused:
		return fmt.Sprintf("parked at stage %d: its pipeline is paused", x.Stage)
	case salvage.EventAwaitingApproval:
		return fmt.Sprintf("parked before stage %d (%s) until a person approves", x.Stage, x.Detail)
	case salvage.EventApproved:
		return fmt.Sprintf("stage %d approved by %s", x.Stage, x.Detail)
	case salvage.EventDeadLettered:
		return fmt.Sprintf("dead-lettered after %d deliveries: envelope %s", x.Delivery, x.Detail)
	case salvage.EventCancelled:
		if x.Detail != "" {
			return fmt.Sprintf("cancelled at stage %d; envelope %s settles its effects", x.Stage, x.Detail)
		}
		return fmt.Sprintf("cancelled at stage %d", x.Stage)
	case salvage.EventCompensated:
		return "compensated: " + x.Detail
	case salvage.EventDone:
		return "done"
	}
	return strings.TrimSpace(string(x.Kind) + " " + x.Detail)
}
