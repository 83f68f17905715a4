package salvagetest

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyNoLeaks runs a package's tests (call it from TestMain) and then
// fails the run when a goroutine outlives them — other than the few that
// the NATS server and client libraries leave behind on purpose, each named
// here, so that a goroutine of Salvage's that sleeps or waits on a socket
// forever is a failure. opts adds ignores of the package's own.
func VerifyNoLeaks(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(LibraryGoroutines(), opts...)...)
}

// LibraryGoroutines are the goroutines of nats-server and nats.go that may
// outlive a test that shut its server down and closed its connections.
func LibraryGoroutines() []goleak.Option {
	return []goleak.Option{
		// The server's accept loop and store flusher end with the process.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).syncBlocks"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).removeFromTempClients"),
		// nats.go v1.55.0 starts this watcher after setting the async
		// publisher's status channel; when the publisher is cleaned up in
		// between (a connection closing under an async publish) it reads
		// the channel as nil and blocks for good.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
