package mcptools

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/salvagehq/salvage"
)

// ErrClosed is returned by a call on a Server after Close.
var ErrClosed = errors.New("mcptools: server closed")

// redialEvery spaces a lost session's reconnects: calls in between fail
// at once (transient, not applied) instead of each starting a process or
// opening a connection.
const redialEvery = 500 * time.Millisecond

// A Server is a connection to one MCP server that outlives its sessions:
// a call that finds the session lost (the server's process died, its HTTP
// endpoint restarted and forgot the session) connects a new one first. A
// call that was in flight when the session was lost is not made again
// here: it fails transient, so Salvage verifies its outcome before it
// repeats a side effect; a call the server refused for not knowing its
// session (it never ran) is made again on the new session. A Server is safe for concurrent use.
type Server struct {
	client    *mcp.Client
	transport Transport

	mu       sync.Mutex
	session  *mcp.ClientSession
	lost     chan struct{} // closed when session ends
	dialing  chan struct{} // closed when the dial under way ends
	name     string
	closed   bool
	lastDial time.Time
	dialErr  error
}

// Dial connects to the MCP server that t reaches and returns it as a
// Server; it fails when the first session cannot be made.
func Dial(ctx context.Context, t Transport) (*Server, error) {
	if t == nil {
		return nil, errors.New("mcptools: Dial needs a Transport")
	}
	s := &Server{transport: t, client: mcp.NewClient(&mcp.Implementation{Name: "salvage", Version: "1"}, nil)}
	if _, err := s.current(ctx); err != nil {
		// Not a call's error: the reason alone, unclassified.
		var ce *salvage.CallError
		if errors.As(err, &ce) {
			err = ce.Err
		}
		return nil, err
	}
	return s, nil
}

// Name is the name the server gave itself when it was first connected.
func (s *Server) Name() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.name
}

// Close ends the session (a server run by Command is stopped) and refuses
// later calls with ErrClosed.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.session == nil {
		return nil
	}
	err := s.session.Close()
	s.session = nil
	return err
}

// drop forgets cs, the current session, once a call learnt that the
// server no longer knows it; the next call connects a new one.
func (s *Server) drop(cs *mcp.ClientSession) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session != cs {
		return
	}
	_ = s.session.Close()
	s.session = nil
}

// current returns a live session, connecting a new one when the last was
// lost. One call dials at a time, outside the lock; the others wait for
// it as long as their contexts let them.
func (s *Server) current(ctx context.Context) (*mcp.ClientSession, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		if s.session != nil {
			select {
			case <-s.lost:
				_ = s.session.Close()
				s.session = nil
			default:
				cs := s.session
				s.mu.Unlock()
				return cs, nil
			}
		}
		if wait := s.dialing; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				// Never sent: waiting for another call's dial.
				return nil, salvage.NotApplied(salvage.Timeout(fmt.Errorf("mcptools: waiting for a session: %w", ctx.Err())))
			}
		}
		if s.dialErr != nil && time.Since(s.lastDial) < redialEvery {
			err := s.dialErr
			s.mu.Unlock()
			return nil, err
		}
		done := make(chan struct{})
		s.dialing, s.lastDial = done, time.Now()
		s.mu.Unlock()
		return s.dial(ctx, done)
	}
}

// dial connects a new session without holding s.mu, then records the
// outcome under it and closes done, waking the calls that waited.
func (s *Server) dial(ctx context.Context, done chan struct{}) (*mcp.ClientSession, error) {
	cs, err := s.client.Connect(ctx, s.transport(), nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dialing = nil
	defer close(done)
	if err != nil {
		// The call never reached the server: nothing to verify.
		s.dialErr = salvage.NotApplied(salvage.Transient(503, fmt.Errorf("mcptools: connect: %w", err)))
		return nil, s.dialErr
	}
	if s.closed {
		_ = cs.Close()
		return nil, ErrClosed
	}
	s.dialErr = nil
	lost := make(chan struct{})
	go func() {
		_ = cs.Wait()
		close(lost)
	}()
	s.session, s.lost = cs, lost
	if s.name == "" {
		if init := cs.InitializeResult(); init != nil && init.ServerInfo != nil {
			s.name = init.ServerInfo.Name
		}
	}
	return cs, nil
}
