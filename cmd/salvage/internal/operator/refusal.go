package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
)

// refusal keeps what the server refused a command's user. The server
// says so asynchronously and a refused request is simply never answered,
// so the command's context is cancelled at once with the refusal as its
// cause, and the command's error names it.
type refusal struct {
	mu      sync.Mutex
	err     error
	cancels []context.CancelCauseFunc
}

// record is the connection's OnPermissionViolation.
func (r *refusal) record(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
	for _, cancel := range r.cancels {
		cancel(err)
	}
}

// watch returns ctx, cancelled when the server refuses this user.
func (r *refusal) watch(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		cancel(r.err)
	}
	r.cancels = append(r.cancels, cancel)
	return ctx
}

// explain replaces err by the refusal behind it, if there was one: what
// failed after it (a cancelled request) says nothing more. The result
// wraps nats.ErrPermissionViolation.
func (r *refusal) explain(err error) error {
	r.mu.Lock()
	refused := r.err
	r.mu.Unlock()
	if err == nil || refused == nil {
		return err
	}
	if errors.Is(err, nats.ErrPermissionViolation) {
		// It names the refusal already (and maybe what to do about it).
		return fmt.Errorf("the server refused this user: %w", err)
	}
	return fmt.Errorf("the server refused this user: %w", refused)
}

// explain is the refusal behind err, if there was one (refusal.explain).
// A user refused without --inbox-prefix hears that it may need one: a
// server that keeps users' replies apart refuses the default _INBOX, and
// a request answered nowhere says nothing more.
func (e *Env) explain(err error) error {
	err = e.refused.explain(err)
	if e.conn.InboxPrefix == "" && errors.Is(err, nats.ErrPermissionViolation) {
		return fmt.Errorf("%w (if the server keeps users' replies apart, give --inbox-prefix, as its permissions name it: _INBOX_<user>)", err)
	}
	return err
}
